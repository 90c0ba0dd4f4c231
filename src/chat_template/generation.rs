//! transformers' `{% generation %}...{% endgeneration %}` block, which minijinja does not parse.
//!
//! In transformers the tag is a jinja2 extension that compiles to a call block whose caller's
//! output is returned unchanged (it only records where assistant text sits). We rewrite each tag
//! into the equivalent `{% call kiln_generation_block() %}...{% endcall %}`, keeping the tag's
//! `-`/`+` whitespace modifiers, so trim_blocks, lstrip_blocks and scoping behave as in Python.
//! Tags inside comments, `{% raw %}` blocks and string literals are left alone.

/// The global function the rewritten tags call; it returns `caller()`.
pub const GENERATION_FN: &str = "kiln_generation_block";

/// Rewrites `{% generation %}`/`{% endgeneration %}` tags; other text is copied unchanged.
pub fn rewrite_generation_tags(src: &str) -> String {
    if !src.contains("generation") {
        return src.to_string();
    }
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len() + 64);
    let mut i = 0;
    let mut copied = 0; // src[copied..i] is pending copy
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (b'{', b'#') => {
                i = find(src, i + 2, "#}").map_or(b.len(), |e| e + 2);
            }
            (b'{', b'{') => i = skip_tag(src, i + 2, "}}"),
            (b'{', b'%') => {
                let tag = parse_block_tag(src, i);
                match tag.name {
                    "generation" | "endgeneration" if tag.end.is_some() => {
                        let end = tag.end.unwrap_or(i);
                        out.push_str(&src[copied..i]);
                        let body = if tag.name == "generation" {
                            format!("call {GENERATION_FN}()")
                        } else {
                            "endcall".to_string()
                        };
                        out.push_str(&format!("{{%{} {body} {}%}}", tag.left, tag.right));
                        i = end;
                        copied = end;
                    }
                    "raw" => {
                        // Skip to the end of the matching `{% endraw %}` tag.
                        let mut j = skip_tag(src, i + 2, "%}");
                        loop {
                            match find(src, j, "{%") {
                                None => {
                                    j = b.len();
                                    break;
                                }
                                Some(k) => {
                                    let inner = parse_block_tag(src, k);
                                    j = skip_tag(src, k + 2, "%}");
                                    if inner.name == "endraw" {
                                        break;
                                    }
                                }
                            }
                        }
                        i = j;
                    }
                    _ => i = skip_tag(src, i + 2, "%}"),
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&src[copied..]);
    out
}

/// A block tag's leading modifier, name, trailing modifier, and end offset when the tag is
/// exactly `{%[-+] name [-+]%}` (nothing else inside).
struct BlockTag<'a> {
    left: &'a str,
    name: &'a str,
    right: &'a str,
    end: Option<usize>,
}

fn parse_block_tag(src: &str, start: usize) -> BlockTag<'_> {
    let b = src.as_bytes();
    let mut j = start + 2;
    let left = match b.get(j) {
        Some(b'-') | Some(b'+') => {
            j += 1;
            &src[j - 1..j]
        }
        _ => "",
    };
    while j < b.len() && b[j].is_ascii_whitespace() {
        j += 1;
    }
    let name_start = j;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
        j += 1;
    }
    let name = &src[name_start..j];
    while j < b.len() && b[j].is_ascii_whitespace() {
        j += 1;
    }
    let right = match b.get(j) {
        Some(b'-') | Some(b'+') if b.get(j + 1) == Some(&b'%') => {
            j += 1;
            &src[j - 1..j]
        }
        _ => "",
    };
    let end = b[j..].starts_with(b"%}").then_some(j + 2);
    BlockTag {
        left,
        name,
        right,
        end,
    }
}

/// Offset just past the `close` marker that ends a tag begun before `from`, skipping string
/// literals; the end of input if unterminated.
fn skip_tag(src: &str, from: usize, close: &str) -> usize {
    let b = src.as_bytes();
    let mut j = from;
    while j < b.len() {
        match b[j] {
            q @ (b'"' | b'\'') => {
                j += 1;
                while j < b.len() && b[j] != q {
                    if b[j] == b'\\' {
                        j += 1;
                    }
                    j += 1;
                }
                j += 1;
            }
            _ if b[j..].starts_with(close.as_bytes()) => return j + close.len(),
            _ => j += 1,
        }
    }
    b.len()
}

fn find(src: &str, from: usize, pat: &str) -> Option<usize> {
    src.get(from..)?.find(pat).map(|k| k + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_tags_keeping_modifiers() {
        assert_eq!(
            rewrite_generation_tags("a{%- generation -%}b{%+endgeneration%}c"),
            "a{%- call kiln_generation_block() -%}b{%+ endcall %}c"
        );
    }

    #[test]
    fn leaves_strings_comments_and_raw_alone() {
        let src = "{{ '{% generation %}' }}{# {% generation %} #}\
                   {% raw %}{% generation %}{% endraw %}{% if generation %}{% endif %}";
        assert_eq!(rewrite_generation_tags(src), src);
    }
}
