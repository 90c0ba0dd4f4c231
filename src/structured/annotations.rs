//! The JSON Schema keywords that only annotate a schema: they never change what validates, so
//! the schema rewrites may drop or ignore them.

/// Keys that only annotate a schema (they never change what validates).
pub(super) const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$comment",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "markdownDescription",
];
