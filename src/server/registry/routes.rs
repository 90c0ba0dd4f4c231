//! The routing table: which model a request's `model` names. Every id and alias of every
//! served model maps to it; no `model` means the default model (`server.default_model`, else
//! the first served). A name no model has goes where [`UnknownNames`] says: with one model
//! served, to it (llama-server's behaviour, so a client configured for "gpt-4.1" or
//! "claude-..." works unchanged); with several, to `server.default_model` when set; else (and
//! always with `server.strict_model_names`) it is a 404 `model_not_found` listing what is
//! served.

use crate::server::error::ApiError;
use std::collections::HashMap;

#[derive(Debug, Clone, Default)]
pub struct Routes {
    /// Per model: its id, then its aliases.
    ids: Vec<Vec<String>>,
    by_name: HashMap<String, usize>,
    /// The model of a request that names none.
    default: usize,
    /// The model of a request that names one no model has (None: 404).
    unknown: Option<usize>,
}

/// How names no model has are treated (`server.default_model`, `server.strict_model_names`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnknownNames {
    /// An id or alias: the model requests without `model` reach, and (unless `strict`) those
    /// naming an unknown one.
    pub default_model: Option<String>,
    /// Unknown names are a 404 even with one model served.
    pub strict: bool,
}

/// `server.default_model` names no served model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server.default_model {name:?} is not the id or alias of a served model; served: {}", served.join(", "))]
pub struct UnknownDefault {
    pub name: String,
    pub served: Vec<String>,
}

impl Routes {
    /// `ids[i]` are model `i`'s id and aliases. A name already taken by an earlier model
    /// keeps pointing there (the configuration refuses such clashes; a `models_dir` file is
    /// left out before it gets here). Unknown names are a 404 (see [`Routes::with_policy`]).
    pub fn new(ids: Vec<Vec<String>>) -> Routes {
        let mut by_name = HashMap::new();
        for (i, names) in ids.iter().enumerate() {
            for n in names {
                by_name.entry(n.clone()).or_insert(i);
            }
        }
        Routes {
            ids,
            by_name,
            default: 0,
            unknown: None,
        }
    }

    /// The table with `policy` for requests naming no model or an unknown one.
    pub fn with_policy(mut self, policy: &UnknownNames) -> Result<Routes, UnknownDefault> {
        let default = match &policy.default_model {
            Some(name) => Some(*self.by_name.get(name).ok_or_else(|| UnknownDefault {
                name: name.clone(),
                served: self.all(),
            })?),
            None => None,
        };
        self.default = default.unwrap_or(0);
        self.unknown = match (policy.strict, default) {
            (true, _) => None,
            (false, Some(d)) => Some(d),
            (false, None) => (self.ids.len() == 1).then_some(0),
        };
        Ok(self)
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

    /// The model a request's `model` names (None: the default model); an unknown name goes
    /// where the policy says (see the module docs).
    pub fn resolve(&self, model: Option<&str>) -> Result<usize, ApiError> {
        let found = match model {
            _ if self.ids.is_empty() => None,
            None => Some(self.default),
            Some(m) => self.by_name.get(m).copied().or(self.unknown),
        };
        found.ok_or_else(|| ApiError::ModelNotFound {
            model: model.unwrap_or_default().to_string(),
            available: self.all(),
        })
    }

    /// The model whose id or alias is exactly `name` (the admin routes, which load and
    /// unload by name, and the model list): unknown names are a 404 whatever the policy.
    pub fn resolve_exact(&self, name: &str) -> Result<usize, ApiError> {
        let found = self.by_name.get(name).copied();
        found.ok_or_else(|| ApiError::ModelNotFound {
            model: name.to_string(),
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

    fn policy(default_model: Option<&str>, strict: bool) -> UnknownNames {
        UnknownNames {
            default_model: default_model.map(str::to_string),
            strict,
        }
    }

    #[test]
    fn one_model_takes_any_name_unless_strict() {
        let one = Routes::new(vec![vec!["smol".into()]])
            .with_policy(&UnknownNames::default())
            .unwrap();
        assert_eq!(one.resolve(Some("gpt-4.1")), Ok(0));
        assert_eq!(one.resolve(Some("claude-sonnet-4-5")), Ok(0));
        assert_eq!(one.resolve(None), Ok(0));
        // The admin routes stay exact.
        assert!(one.resolve_exact("gpt-4.1").is_err());
        let strict = Routes::new(vec![vec!["smol".into()]])
            .with_policy(&policy(None, true))
            .unwrap();
        assert!(strict.resolve(Some("gpt-4.1")).is_err());
        assert_eq!(strict.resolve(Some("smol")), Ok(0));
    }

    #[test]
    fn several_models_send_unknown_names_to_the_default_model_only_when_set() {
        assert!(routes()
            .with_policy(&UnknownNames::default())
            .unwrap()
            .resolve(Some("gpt-4.1"))
            .is_err());
        let r = routes().with_policy(&policy(Some("gemma"), false)).unwrap();
        assert_eq!(r.resolve(Some("gpt-4.1")), Ok(1));
        assert_eq!(r.resolve(None), Ok(1));
        assert_eq!(r.resolve(Some("smol")), Ok(0));
        // Strict: the default model takes requests without `model`, unknown names are 404.
        let r = routes().with_policy(&policy(Some("gpt-4o"), true)).unwrap();
        assert_eq!(r.resolve(None), Ok(0));
        assert!(r.resolve(Some("gpt-4.1")).is_err());
    }

    #[test]
    fn a_default_model_that_is_not_served_is_refused() {
        let e = routes()
            .with_policy(&policy(Some("llama"), false))
            .unwrap_err();
        assert_eq!(e.name, "llama");
        assert!(e.to_string().contains("smol, gpt-4o, gemma, other"), "{e}");
    }
}
