//! Why a constraint could not be built (shared by the grammar compiler and the vocabulary
//! setup).

/// Why a constraint could not be built. [`ConstraintError::param`] names the request field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConstraintError {
    /// The schema uses a JSON Schema feature the grammar engine cannot enforce.
    #[error("{param}: the schema uses a feature kiln cannot enforce: {detail}")]
    Unsupported { param: String, detail: String },
    /// The schema is malformed or can never be satisfied.
    #[error("{param}: invalid schema: {detail}")]
    Invalid { param: String, detail: String },
    /// The model's vocabulary could not be turned into a token trie.
    #[error("structured output is unavailable for this model: {0}")]
    Setup(String),
}

impl ConstraintError {
    /// The request field at fault (None for a server-side setup failure).
    pub fn param(&self) -> Option<&str> {
        match self {
            ConstraintError::Unsupported { param, .. } | ConstraintError::Invalid { param, .. } => {
                Some(param)
            }
            ConstraintError::Setup(_) => None,
        }
    }
}
