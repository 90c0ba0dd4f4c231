//! Python semantics for the `~` and `+` operators, which minijinja's VM fixes differently.
//!
//! - `a ~ b` is `str(a) + str(b)` in jinja2: `1e+20`, `{'k': 'v'}`. minijinja concatenates its
//!   own `Display` forms (`100000000000000000000.0`, `{"k": "v"}`). Every `~` is rewritten into
//!   `kiln_concat(a, b)`.
//! - With autoescape off, jinja2 still returns `Markup` from `|safe` and `|escape`, and
//!   `Markup.__add__`/`__radd__` HTML-escape the plain-string operand (`"` -> `&#34;`).
//!   minijinja keeps a "safe" mark on such strings but its `+` ignores it. In templates that
//!   use those filters, every `a + b` is rewritten into `kiln_markup_add(a, b)`.
//!
//! The rewrite works on the source text, guided by minijinja's own parser (node spans), so
//! whitespace control, line numbers and everything else stay as written.

use super::python::{py_str, write_str};
use minijinja::machinery::{ast, parse, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// The global function `+` is rewritten into (in templates that use Markup).
pub const MARKUP_ADD_FN: &str = "kiln_markup_add";
/// The global function `~` is rewritten into.
pub const CONCAT_FN: &str = "kiln_concat";

/// Filters whose result is a jinja2 `Markup` string.
const MARKUP_FILTERS: [&str; 4] = ["safe", "escape", "e", "forceescape"];

/// Returns the rewritten source, or `None` when nothing needs rewriting, the source does not
/// parse (the real compile then reports the syntax error) or a span looks unexpected (then the
/// template is used as written).
pub fn rewrite_operators(source: &str, ws: WhitespaceConfig) -> Option<String> {
    let maybe_markup = MARKUP_FILTERS.iter().any(|f| source.contains(f)) && source.contains('+');
    if !maybe_markup && !source.contains('~') {
        return None;
    }
    let ast = parse(source, "chat_template", SyntaxConfig, ws).ok()?;
    // First pass: does the template produce Markup at all?
    let mut walk = Walk {
        src: source,
        edits: Vec::new(),
        uses_markup: false,
        rewrite_add: false,
        ok: true,
    };
    walk.stmt(&ast);
    if walk.uses_markup {
        walk.edits.clear();
        walk.rewrite_add = true;
        walk.stmt(&ast);
    }
    if walk.edits.is_empty() || !walk.ok {
        return None;
    }
    // Apply edits in source order; at one offset, closing parens go before opening calls.
    let mut edits = walk.edits;
    edits.sort_by_key(|e| (e.at, e.order));
    let mut out = String::with_capacity(source.len() + edits.len() * 12);
    let mut pos = 0;
    for e in edits {
        out.push_str(source.get(pos..e.at)?);
        out.push_str(e.text);
        pos = e.at + e.remove;
    }
    out.push_str(source.get(pos..)?);
    Some(out)
}

/// jinja2's `a ~ b`: `str(a) + str(b)` (undefined prints as nothing).
pub fn concat(a: Value, b: Value) -> Value {
    let mut out = py_str(&a);
    write_str(&mut out, &b);
    Value::from(out)
}

/// Python's `a + b` where either side may be a `Markup` (minijinja safe string).
pub fn markup_add(a: Value, b: Value) -> Result<Value, Error> {
    let a_markup = a.kind() == ValueKind::String && a.is_safe();
    let b_markup = b.kind() == ValueKind::String && b.is_safe();
    if a_markup || b_markup {
        let (Some(x), Some(y)) = (a.as_str(), b.as_str()) else {
            return Err(type_error(&a, &b));
        };
        let mut out = String::with_capacity(x.len() + y.len());
        push_maybe_escaped(&mut out, x, a_markup);
        push_maybe_escaped(&mut out, y, b_markup);
        return Ok(Value::from_safe_string(out));
    }
    match (a.kind(), b.kind()) {
        (ValueKind::String, ValueKind::String) => Ok(Value::from(
            [a.as_str().unwrap_or(""), b.as_str().unwrap_or("")].concat(),
        )),
        (ValueKind::Number | ValueKind::Bool, ValueKind::Number | ValueKind::Bool) => {
            let integral = |v: &Value| v.kind() != ValueKind::Number || v.is_integer();
            if integral(&a) && integral(&b) {
                let (x, y) = (i128::try_from(a.clone())?, i128::try_from(b.clone())?);
                return x.checked_add(y).map(Value::from).ok_or_else(|| {
                    Error::new(ErrorKind::InvalidOperation, "integer overflow in +")
                });
            }
            Ok(Value::from(f64::try_from(a)? + f64::try_from(b)?))
        }
        (ValueKind::Seq | ValueKind::Iterable, ValueKind::Seq | ValueKind::Iterable) => Ok(
            Value::from(a.try_iter()?.chain(b.try_iter()?).collect::<Vec<_>>()),
        ),
        _ => Err(type_error(&a, &b)),
    }
}

fn type_error(a: &Value, b: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "unsupported operand types for +: {} and {}",
            a.kind(),
            b.kind()
        ),
    )
}

/// markupsafe's escape: `& < > ' "` become `&amp; &lt; &gt; &#39; &#34;`.
fn push_maybe_escaped(out: &mut String, s: &str, already_safe: bool) {
    if already_safe {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
}

/// One source edit: at byte `at`, drop `remove` bytes and insert `text`.
struct Edit {
    at: usize,
    remove: usize,
    text: &'static str,
    /// Tie-break at one offset: 0 = closing paren, 1 = operator, 2 = call opening.
    order: u8,
}

struct Walk<'s> {
    src: &'s str,
    edits: Vec<Edit>,
    uses_markup: bool,
    /// Whether `+` is rewritten (only once the template is known to use Markup).
    rewrite_add: bool,
    ok: bool,
}

impl Walk<'_> {
    fn stmts(&mut self, stmts: &[ast::Stmt<'_>]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, stmt: &ast::Stmt<'_>) {
        use ast::Stmt as S;
        match stmt {
            S::Template(t) => self.stmts(&t.children),
            S::EmitExpr(e) => self.expr(&e.expr),
            S::EmitRaw(_) | S::Continue(_) | S::Break(_) => {}
            S::ForLoop(f) => {
                self.expr(&f.target);
                self.expr(&f.iter);
                if let Some(e) = &f.filter_expr {
                    self.expr(e);
                }
                self.stmts(&f.body);
                self.stmts(&f.else_body);
            }
            S::IfCond(i) => {
                self.expr(&i.expr);
                self.stmts(&i.true_body);
                self.stmts(&i.false_body);
            }
            S::WithBlock(w) => {
                for (a, b) in &w.assignments {
                    self.expr(a);
                    self.expr(b);
                }
                self.stmts(&w.body);
            }
            S::Set(s) => {
                self.expr(&s.target);
                self.expr(&s.expr);
            }
            S::SetBlock(s) => {
                self.expr(&s.target);
                if let Some(f) = &s.filter {
                    self.expr(f);
                }
                self.stmts(&s.body);
            }
            S::AutoEscape(a) => {
                self.expr(&a.enabled);
                self.stmts(&a.body);
            }
            S::FilterBlock(f) => {
                self.expr(&f.filter);
                self.stmts(&f.body);
            }
            S::Block(b) => self.stmts(&b.body),
            S::Import(i) => {
                self.expr(&i.expr);
                self.expr(&i.name);
            }
            S::FromImport(i) => self.expr(&i.expr),
            S::Extends(e) => self.expr(&e.name),
            S::Include(i) => self.expr(&i.name),
            S::Macro(m) => self.macro_decl(m),
            S::CallBlock(c) => {
                self.call(&c.call);
                self.macro_decl(&c.macro_decl);
            }
            S::Do(d) => self.call(&d.call),
        }
    }

    fn macro_decl(&mut self, m: &ast::Macro<'_>) {
        for e in m.args.iter().chain(m.defaults.iter()) {
            self.expr(e);
        }
        self.stmts(&m.body);
    }

    fn call(&mut self, c: &ast::Call<'_>) {
        self.expr(&c.expr);
        self.args(&c.args);
    }

    fn args(&mut self, args: &[ast::CallArg<'_>]) {
        for a in args {
            match a {
                ast::CallArg::Pos(e)
                | ast::CallArg::Kwarg(_, e)
                | ast::CallArg::PosSplat(e)
                | ast::CallArg::KwargSplat(e) => self.expr(e),
            }
        }
    }

    fn expr(&mut self, expr: &ast::Expr<'_>) {
        use ast::Expr as E;
        match expr {
            E::Var(_) | E::Const(_) => {}
            E::Slice(s) => {
                self.expr(&s.expr);
                for e in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(e);
                }
            }
            E::UnaryOp(u) => self.expr(&u.expr),
            E::BinOp(b) => {
                match b.op {
                    ast::BinOpKind::Add if self.rewrite_add => {
                        self.rewrite(b.span(), &b.left, '+', "kiln_markup_add(")
                    }
                    ast::BinOpKind::Concat => self.rewrite(b.span(), &b.left, '~', "kiln_concat("),
                    _ => {}
                }
                self.expr(&b.left);
                self.expr(&b.right);
            }
            E::Compare(c) => {
                self.expr(&c.expr);
                for op in &c.ops {
                    self.expr(&op.expr);
                }
            }
            E::IfExpr(i) => {
                self.expr(&i.test_expr);
                self.expr(&i.true_expr);
                if let Some(f) = &i.false_expr {
                    self.expr(f);
                }
            }
            E::Filter(f) => {
                if MARKUP_FILTERS.contains(&f.name) {
                    self.uses_markup = true;
                }
                if let Some(e) = &f.expr {
                    self.expr(e);
                }
                self.args(&f.args);
            }
            E::Test(t) => {
                self.expr(&t.expr);
                self.args(&t.args);
            }
            E::GetAttr(g) => self.expr(&g.expr),
            E::GetItem(g) => {
                self.expr(&g.expr);
                self.expr(&g.subscript_expr);
            }
            E::Call(c) => self.call(c),
            E::List(l) => {
                for e in &l.items {
                    self.expr(e);
                }
            }
            E::Map(m) => {
                for e in m.keys.iter().chain(m.values.iter()) {
                    self.expr(e);
                }
            }
        }
    }

    /// Records `call` (`kiln_xxx(`) at the node start, `,` for the operator, `)` at the end.
    fn rewrite(
        &mut self,
        span: minijinja::machinery::Span,
        left: &ast::Expr<'_>,
        op: char,
        call: &'static str,
    ) {
        let start = span.start_offset as usize;
        let end = span.end_offset as usize;
        let left_end = left.span().end_offset as usize;
        // Between the left operand and the operator only whitespace and closing parens.
        let Some(after_left) = self.src.get(left_end..end) else {
            self.ok = false;
            return;
        };
        let Some(rel) = after_left.find(|c: char| !c.is_whitespace() && c != ')') else {
            self.ok = false;
            return;
        };
        if !after_left[rel..].starts_with(op) || start > left_end {
            self.ok = false;
            return;
        }
        self.edits.push(Edit {
            at: start,
            remove: 0,
            text: call,
            order: 2,
        });
        self.edits.push(Edit {
            at: left_end + rel,
            remove: 1,
            text: ",",
            order: 1,
        });
        self.edits.push(Edit {
            at: end,
            remove: 0,
            text: ")",
            order: 0,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> WhitespaceConfig {
        WhitespaceConfig {
            keep_trailing_newline: false,
            lstrip_blocks: true,
            trim_blocks: true,
        }
    }

    #[test]
    fn rewrites_additions_only_when_markup_is_used() {
        assert_eq!(rewrite_operators("{{ a + b }}", ws()), None);
        assert_eq!(
            rewrite_operators("{{ a ~ (b ~ c) }}{{ 1 + 2 }}", ws()).as_deref(),
            Some("{{ kiln_concat(a , (kiln_concat(b , c))) }}{{ 1 + 2 }}")
        );
        assert_eq!(
            rewrite_operators("{{ 'x'|safe + (a + b) + t|tojson }}", ws()).as_deref(),
            Some(
                "{{ kiln_markup_add(kiln_markup_add('x'|safe , (kiln_markup_add(a , b))) , t|tojson) }}"
            )
        );
    }

    #[test]
    fn markup_add_escapes_the_plain_side() {
        let m = Value::from_safe_string("<b>".into());
        let s = Value::from("\"&'");
        let r = markup_add(m.clone(), s.clone()).unwrap();
        assert_eq!(r.as_str(), Some("<b>&#34;&amp;&#39;"));
        assert!(r.is_safe());
        let r = markup_add(s, m).unwrap();
        assert_eq!(r.as_str(), Some("&#34;&amp;&#39;<b>"));
        assert_eq!(
            markup_add(Value::from(1), Value::from(true)).unwrap(),
            Value::from(2)
        );
    }
}
