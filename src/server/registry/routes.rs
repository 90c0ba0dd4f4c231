//! The routing table: which model a request's `model` names. Every id and alias of every
//! served model maps to it; no `model` means the default (the first served); anything else is
//! a 404 `model_not_found` listing what is served.

use crate::server::error::ApiError;
use std::collections::HashMap;

#[derive(Debug, Clone, Default)]
pub struct Routes {
    /// Per model: its id, then its aliases.
    ids: Vec<Vec<String>>,
    by_name: HashMap<String, usize>,
}

impl Routes {
    /// `ids[i]` are model `i`'s id and aliases. A name already taken by an earlier model
    /// keeps pointing there (the configuration refuses such clashes; a `models_dir` file is
    /// left out before it gets here).
    pub fn new(ids: Vec<Vec<String>>) -> Routes {
        let mut by_name = HashMap::new();
        for (i, names) in ids.iter().enumerate() {
            for n in names {
                by_name.entry(n.clone()).or_insert(i);
            }
        }
        Routes { ids, by_name }
    }

    /// True when `name` names a model already.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Model `i`'s id (the one replies carry).
    pub fn id(&self, i: usize) -> &str {
        &self.ids[i][0]
    }

    /// Model `i`'s id and aliases.
    pub fn names(&self, i: usize) -> &[String] {
        &self.ids[i]
    }

    /// Every id and alias that routes somewhere, model by model.
    pub fn all(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, names) in self.ids.iter().enumerate() {
            out.extend(names.iter().filter(|n| self.by_name[*n] == i).cloned());
        }
        out
    }

    /// The model a request's `model` names (None: the default model).
    pub fn resolve(&self, model: Option<&str>) -> Result<usize, ApiError> {
        let found = match model {
            None if !self.ids.is_empty() => Some(0),
            None => None,
            Some(m) => self.by_name.get(m).copied(),
        };
        found.ok_or_else(|| ApiError::ModelNotFound {
            model: model.unwrap_or_default().to_string(),
            available: self.all(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Routes {
        Routes::new(vec![
            vec!["smol".into(), "gpt-4o".into()],
            vec!["gemma".into()],
            // A later model cannot take an earlier one's name.
            vec!["other".into(), "smol".into()],
        ])
    }

    #[test]
    fn names_and_aliases_route_to_their_model() {
        let r = routes();
        assert_eq!(r.resolve(Some("smol")), Ok(0));
        assert_eq!(r.resolve(Some("gpt-4o")), Ok(0));
        assert_eq!(r.resolve(Some("gemma")), Ok(1));
        assert_eq!(r.resolve(Some("other")), Ok(2));
        assert_eq!(r.id(1), "gemma");
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn no_model_is_the_default_one() {
        assert_eq!(routes().resolve(None), Ok(0));
    }

    #[test]
    fn an_unknown_model_is_a_404_listing_the_served_ids() {
        let e = routes().resolve(Some("GEMMA")).unwrap_err();
        assert_eq!(e.status(), axum::http::StatusCode::NOT_FOUND);
        let env = e.envelope().error;
        assert_eq!(env.code.as_deref(), Some("model_not_found"));
        assert_eq!(env.param.as_deref(), Some("model"));
        assert!(
            env.message.ends_with("serves: smol, gpt-4o, gemma, other"),
            "{}",
            env.message
        );
        let empty = Routes::new(Vec::new());
        assert!(empty.is_empty());
        assert!(empty.resolve(None).is_err());
    }
}
