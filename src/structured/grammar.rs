//! A request's constraint: a JSON schema (or any JSON object) compiled by llguidance into a
//! matcher in its start state, cloned for each sequence that runs it.

use super::bounds::{JsonBounds, TokenBytes, LIMITS};
use super::error::ConstraintError;
use super::seq::SeqConstraint;
use super::think::ThinkFrame;
use super::vocab::Grammars;
use llguidance::api::TopLevelGrammar;
use llguidance::Matcher;
use serde_json::{json, Value};
use std::sync::Arc;

/// How generated JSON is laid out: one space after `,` and `:` (as Python's `json.dumps`
/// writes it, common in training data), no other whitespace. Fixed layout keeps a sampling
/// model from spending its token budget on blank lines.
fn layout() -> Value {
    json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": false,
    })
}

/// A compiled grammar in its start state. Compile once per request (off the async runtime:
/// a schema takes milliseconds), then [`Constraint::start`] a matcher per sequence.
pub struct Constraint {
    matcher: Matcher,
    /// What it enforces, for logs (`json_schema:name`).
    label: String,
    /// The bounds on JSON runs ([`super::bounds`]): the token bytes, and whether the JSON
    /// is embedded amid other text; None when the output holds free text they would distort.
    bounds: Option<(Arc<TokenBytes>, bool)>,
    /// Near `max_tokens`, steer the reply to close its JSON ([`JsonBounds::close`]): set for
    /// `response_format`, not for tool calls (a call cut short is reported as partial).
    closes: bool,
    /// The literal runs of the schema's patterns ([`super::phrases`]).
    phrases: Arc<[Vec<u8>]>,
    /// The grammar starts with a free think part ([`super::think`]): each sequence watches
    /// it and forces its close near the end of its budget.
    think: Option<Arc<ThinkFrame>>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Constraint({})", self.label)
    }
}

/// Two constraints are equal only when they are the same compiled grammar.
impl PartialEq for Constraint {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Constraint {
    /// Output must be JSON valid against `schema`; `param` names the request field holding it
    /// (for errors). Any `x-guidance` key in the schema is replaced by kiln's layout.
    pub fn json_schema(
        g: &Grammars,
        schema: &Value,
        param: &str,
        label: &str,
    ) -> Result<Constraint, ConstraintError> {
        let (schema, phrases) = prepare_schema(schema, param)?;
        let grammar = TopLevelGrammar::from_json_schema(schema);
        // llguidance reports errors as text; a panic inside it is caught and reported too.
        let parser = g.factory().create_parser(grammar);
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(classify(param, &e));
        }
        Ok(Constraint {
            matcher,
            label: label.to_string(),
            bounds: Some((Arc::clone(g.token_bytes()), false)),
            closes: false,
            phrases: phrases.into(),
            think: None,
        })
    }

    /// Output must be the Lark items `prefix` (control tokens as `<[id]>`, text as string
    /// literals, rules named in `rules`) followed by JSON valid against `schema`, which is
    /// checked and rewritten as [`Constraint::json_schema`] does (errors name `param`). For
    /// formats that frame an answer in a header, as gpt-oss's harmony writes its final
    /// channel, and for a think part before the answer ([`ThinkFrame::prefix`]).
    pub fn json_schema_after(
        g: &Grammars,
        prefix: &str,
        rules: &str,
        schema: &Value,
        param: &str,
        label: &str,
    ) -> Result<Constraint, ConstraintError> {
        let (schema, phrases) = prepare_schema(schema, param)?;
        let mut c = Constraint::lark(
            g,
            &format!("start: {prefix} %json {schema}\n{rules}"),
            param,
            label,
            true,
        )?;
        c.phrases = phrases.into();
        Ok(c)
    }

    /// Output must follow a Lark grammar (llguidance's syntax; `%json {schema}` embeds a
    /// schema). Used for tool-call syntaxes with tags around the JSON. `json_bounds`: bound
    /// the runs of the JSON values in it (for output that is calls only; free text beside
    /// them would be bounded too where it happens to hold braces).
    pub fn lark(
        g: &Grammars,
        grammar: &str,
        param: &str,
        label: &str,
        json_bounds: bool,
    ) -> Result<Constraint, ConstraintError> {
        let parser = g
            .factory()
            .create_parser(TopLevelGrammar::from_lark(grammar.to_string()));
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(classify(param, &e));
        }
        Ok(Constraint {
            matcher,
            label: label.to_string(),
            bounds: json_bounds.then(|| (Arc::clone(g.token_bytes()), true)),
            closes: false,
            phrases: Arc::from(Vec::new()),
            think: None,
        })
    }

    /// Output must be one JSON object (`response_format: {"type": "json_object"}`).
    pub fn json_object(g: &Grammars) -> Result<Constraint, ConstraintError> {
        Constraint::json_schema(
            g,
            &json!({"type": "object"}),
            "response_format",
            "json_object",
        )
    }

    /// A fresh matcher for one sequence, in the start state (without the bounds on JSON
    /// runs: [`Constraint::sequence`] is what a sequence runs).
    pub fn start(&self) -> Matcher {
        self.matcher.clone()
    }

    /// One sequence's constraint in the start state: the grammar, narrowed by the bounds on
    /// JSON runs ([`super::bounds`]).
    pub fn sequence(&self) -> SeqConstraint {
        let bounds = self
            .bounds
            .as_ref()
            .map(|(t, embedded)| JsonBounds::new(Arc::clone(t), *embedded, LIMITS));
        let seq = SeqConstraint::with_bounds(self.matcher.clone(), bounds)
            .with_phrases(Arc::clone(&self.phrases));
        match &self.think {
            Some(t) => seq.with_think(t.budget(usize::MAX)),
            None => seq,
        }
    }

    /// The same constraint, closing its JSON near the end of a sequence's budget (see
    /// [`super::bounds`]): what `response_format` asks for, a value that parses.
    pub fn closing(mut self) -> Constraint {
        self.closes = true;
        self
    }

    /// [`Constraint::sequence`] for a sequence that may draw `max_tokens`: it closes near the
    /// end when this constraint is [`Constraint::closing`].
    pub fn sequence_within(&self, max_tokens: usize) -> SeqConstraint {
        let mut seq = self.sequence();
        if let Some(t) = &self.think {
            seq = seq.with_think(t.budget(max_tokens));
        }
        if self.closes {
            seq.with_budget(max_tokens)
        } else {
            seq
        }
    }

    /// The same constraint, its grammar starting with `frame`'s think part (built with
    /// [`ThinkFrame::wrap`] or [`ThinkFrame::prefix`]).
    pub fn thinking(mut self, frame: Arc<ThinkFrame>) -> Constraint {
        self.think = Some(frame);
        self
    }

    pub fn label(&self) -> &str {
        &self.label
    }
}

/// A request's schema made ready for llguidance: `true` as `{}`, rewritten
/// ([`super::rewrite`]), refused where llguidance would enforce it wrongly, with kiln's
/// layout; and the literal runs of its patterns ([`super::phrases`]).
fn prepare_schema(schema: &Value, param: &str) -> Result<(Value, Vec<Vec<u8>>), ConstraintError> {
    let mut schema = match schema {
        Value::Object(_) => schema.clone(),
        // `true` is the schema every value satisfies.
        Value::Bool(true) => json!({}),
        _ => {
            return Err(ConstraintError::Invalid {
                param: param.to_string(),
                detail: "a schema must be a JSON object".to_string(),
            })
        }
    };
    super::rewrite::rewrite(&mut schema);
    if let Some(path) = inexact_number_range(&schema, "") {
        return Err(ConstraintError::Unsupported {
            param: param.to_string(),
            detail: format!(
                "the number range at {path:?} has an exclusive integer bound less than 1 from \
                 the other bound, which the grammar engine (llguidance 1.9) cannot enforce \
                 exactly; use an inclusive bound or type integer"
            ),
        });
    }
    let phrases = super::phrases::pattern_phrases(&schema);
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("x-guidance".to_string(), layout());
    }
    Ok((schema, phrases))
}

/// A JSON pointer to a `number` range llguidance 1.9 would enforce wrongly, if the schema has
/// one: its float-range regex lets the bound itself through when an exclusive bound is an
/// integer and the other bound is within 1 of it (`exclusiveMinimum: 0, maximum: 0.5` admits
/// `0`). Refused rather than silently allowing invalid output.
fn inexact_number_range(v: &Value, at: &str) -> Option<String> {
    match v {
        Value::Object(o) => {
            let num = |k: &str| o.get(k).and_then(Value::as_f64);
            let is_number = match o.get("type") {
                Some(Value::String(t)) => t == "number",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "number"),
                _ => true,
            };
            let upper = num("maximum")
                .into_iter()
                .chain(num("exclusiveMaximum"))
                .reduce(f64::min);
            let lower = num("minimum")
                .into_iter()
                .chain(num("exclusiveMinimum"))
                .reduce(f64::max);
            // The faulty case: an integer exclusive bound on the side of zero the range
            // extends away from (`exclusiveMinimum >= 0`, or `exclusiveMaximum <= 0`
            // mirrored), with the other bound less than 1 away.
            let near = |b: f64, other: Option<f64>| {
                b.fract() == 0.0 && other.is_some_and(|x| (x - b).abs() < 1.0)
            };
            if is_number
                && (num("exclusiveMinimum").is_some_and(|m| m >= 0.0 && near(m, upper))
                    || num("exclusiveMaximum").is_some_and(|m| m <= 0.0 && near(m, lower)))
            {
                return Some(at.to_string());
            }
            o.iter().find_map(|(k, x)| {
                let k = k.replace('~', "~0").replace('/', "~1");
                inexact_number_range(x, &format!("{at}/{k}"))
            })
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| inexact_number_range(x, &format!("{at}/{i}"))),
        _ => None,
    }
}

/// Sorts llguidance's error text into unsupported features and invalid schemas.
fn classify(param: &str, e: &str) -> ConstraintError {
    let detail: String = e.chars().take(400).collect();
    let unsupported = [
        "Unimplemented",
        "not supported",
        "unsupported",
        "Unknown format",
    ]
    .iter()
    .any(|k| e.contains(k));
    if unsupported {
        ConstraintError::Unsupported {
            param: param.to_string(),
            detail,
        }
    } else {
        ConstraintError::Invalid {
            param: param.to_string(),
            detail,
        }
    }
}
