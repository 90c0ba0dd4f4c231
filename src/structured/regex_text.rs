//! Text inside the grammars' regexes.

/// `text` as a regex matching it literally (llguidance's regex syntax, inside `/.../`).
pub(crate) fn regex_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if "\\.+*?()|[]{}^$/-&~#".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
