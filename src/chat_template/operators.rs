//! Python semantics for the `~` and `+` operators, which minijinja's VM fixes differently.
//!
//! - `a ~ b` is `str(a) + str(b)` in jinja2: `1e+20`, `{'k': 'v'}`. minijinja concatenates its
//!   own `Display` forms (`100000000000000000000.0`, `{"k": "v"}`). Every `~` is rewritten into
//!   `kiln_concat(a, b)`.
//! - `a + b`: with autoescape off, jinja2 still returns `Markup` from `|safe` and `|escape`,
//!   and `Markup.__add__`/`__radd__` HTML-escape the plain-string operand (`"` -> `&#34;`).
//!   minijinja keeps a "safe" mark on such strings but its `+` ignores it. Every `+` is
//!   rewritten into `kiln_add(a, b)`, which also refuses `str + int` as Python does.
//!
//! Both functions cap the size of the value they build, so a template doubling a string in a
//! loop stops at [`super::RenderLimits::max_output_bytes`] instead of exhausting memory.
//!
//! The rewrite works on the source text, guided by minijinja's own parser (node spans), so
//! whitespace control, line numbers and everything else stay as written.

use super::format::format;
use super::limits::{check_len, items_error, MAX_SEQ_ITEMS};
use super::python::{py_str, write_str, Tuple};
use minijinja::machinery::{ast, parse, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

/// The global function `+` is rewritten into.
pub const ADD_FN: &str = "kiln_add";
/// The global function `~` is rewritten into.
pub const CONCAT_FN: &str = "kiln_concat";
/// The global function `*` is rewritten into.
pub const MUL_FN: &str = "kiln_mul";
/// The global function `%` is rewritten into.
pub const MOD_FN: &str = "kiln_mod";
/// The global function tuple literals are wrapped in.
pub const TUPLE_FN: &str = "kiln_tuple";

/// Returns the rewritten source, or `None` when nothing needs rewriting, the source does not
/// parse (the real compile then reports the syntax error) or a span looks unexpected (then the
/// template is used as written).
pub fn rewrite_operators(source: &str, ws: WhitespaceConfig) -> Option<String> {
    if !source.contains(['+', '~', '*', '%', ',']) {
        return None;
    }
    let ast = parse(source, "chat_template", SyntaxConfig, ws).ok()?;
    let mut walk = Walk {
        src: source,
        edits: Vec::new(),
        ok: true,
    };
    walk.stmt(&ast);
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

/// jinja2's `a ~ b`: `str(a) + str(b)` (undefined prints as nothing); at most `cap` bytes.
pub fn concat(a: &Value, b: &Value, cap: usize) -> Result<Value, Error> {
    let mut out = py_str(a, cap)?;
    write_str(&mut out, b, cap)?;
    Ok(Value::from(out))
}

/// Python's `a * b`: numbers multiply, `str * int` and `list * int` repeat (at most `cap`
/// bytes / [`MAX_SEQ_ITEMS`] items).
pub fn mul(a: &Value, b: &Value, cap: usize) -> Result<Value, Error> {
    let is_count = |v: &Value| {
        v.kind() == ValueKind::Bool || (v.kind() == ValueKind::Number && v.is_integer())
    };
    let repeat = |seq: &Value, n: &Value| -> Result<Value, Error> {
        let n = i128::try_from(n.clone())?.max(0);
        if let Some(s) = seq.as_str() {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            check_len(s.len().saturating_mul(n), cap)?;
            return Ok(Value::from(s.repeat(n)));
        }
        let items: Vec<Value> = seq.try_iter()?.collect();
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if items.len().saturating_mul(n) > MAX_SEQ_ITEMS {
            return Err(items_error());
        }
        let mut out = Vec::with_capacity(items.len() * n);
        for _ in 0..n {
            out.extend(items.iter().cloned());
        }
        Ok(Value::from(out))
    };
    let is_seq = |v: &Value| matches!(v.kind(), ValueKind::String | ValueKind::Seq);
    match (a.kind(), b.kind()) {
        _ if is_seq(a) && is_count(b) => repeat(a, b),
        _ if is_count(a) && is_seq(b) => repeat(b, a),
        (ValueKind::Number | ValueKind::Bool, ValueKind::Number | ValueKind::Bool) => {
            if is_count(a) && is_count(b) {
                let (x, y) = (i128::try_from(a.clone())?, i128::try_from(b.clone())?);
                return x.checked_mul(y).map(Value::from).ok_or_else(|| {
                    Error::new(ErrorKind::InvalidOperation, "integer overflow in *")
                });
            }
            Ok(Value::from(
                f64::try_from(a.clone())? * f64::try_from(b.clone())?,
            ))
        }
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "unsupported operand types for *: {} and {}",
                a.kind(),
                b.kind()
            ),
        )),
    }
}

/// Python's `a + b` where either side may be a `Markup` (minijinja safe string); a string
/// result holds at most `cap` bytes, a list at most `MAX_SEQ_ITEMS` items.
pub fn add(a: &Value, b: &Value, cap: usize) -> Result<Value, Error> {
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        check_len(x.len() + y.len(), cap)?;
    }
    python_add(a.clone(), b.clone())
}

/// Python's `a % b`: printf-style formatting when `a` is a string (a tuple on the right is
/// the argument list, anything else one argument), otherwise modulo with the sign of the
/// divisor.
pub fn rem(state: &State, a: &Value, b: &Value, cap: usize) -> Result<Value, Error> {
    if a.kind() == ValueKind::String {
        let args: Vec<Value> = match b.downcast_object_ref::<Tuple>() {
            Some(t) => t.0.clone(),
            None => vec![b.clone()],
        };
        return format(state, a, Rest(args), cap);
    }
    let is_int = |v: &Value| {
        v.kind() == ValueKind::Bool || (v.kind() == ValueKind::Number && v.is_integer())
    };
    let numeric = |v: &Value| matches!(v.kind(), ValueKind::Number | ValueKind::Bool);
    if !numeric(a) || !numeric(b) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "unsupported operand types for %: {} and {}",
                a.kind(),
                b.kind()
            ),
        ));
    }
    let zero = || Error::new(ErrorKind::InvalidOperation, "modulo by zero");
    if is_int(a) && is_int(b) {
        let (x, y) = (i128::try_from(a.clone())?, i128::try_from(b.clone())?);
        if y == 0 {
            return Err(zero());
        }
        let r = x.checked_rem(y).ok_or_else(zero)?;
        return Ok(Value::from(if r != 0 && (r < 0) != (y < 0) {
            r + y
        } else {
            r
        }));
    }
    let (x, y) = (f64::try_from(a.clone())?, f64::try_from(b.clone())?);
    if y == 0.0 {
        return Err(zero());
    }
    let r = x % y;
    Ok(Value::from(if r != 0.0 && (r < 0.0) != (y < 0.0) {
        r + y
    } else {
        r
    }))
}

fn python_add(a: Value, b: Value) -> Result<Value, Error> {
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
        (ValueKind::Seq | ValueKind::Iterable, ValueKind::Seq | ValueKind::Iterable) => {
            let items: Vec<Value> = a
                .try_iter()?
                .chain(b.try_iter()?)
                .take(MAX_SEQ_ITEMS + 1)
                .collect();
            if items.len() > MAX_SEQ_ITEMS {
                return Err(items_error());
            }
            Ok(Value::from(items))
        }
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

/// Appends `s`, HTML-escaped unless it is `already_safe`.
fn push_maybe_escaped(out: &mut String, s: &str, already_safe: bool) {
    if already_safe {
        out.push_str(s);
    } else {
        push_html_escaped(out, s);
    }
}

/// markupsafe's escape: `& < > ' "` become `&amp; &lt; &gt; &#39; &#34;`.
pub fn push_html_escaped(out: &mut String, s: &str) {
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
            // Assignment targets (`for (a, b) in`, `set x`) are names, never rewritten.
            S::ForLoop(f) => {
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
                for (_target, value) in &w.assignments {
                    self.expr(value);
                }
                self.stmts(&w.body);
            }
            S::Set(s) => self.expr(&s.expr),
            S::SetBlock(s) => {
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
        for e in &m.defaults {
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
                    ast::BinOpKind::Add => self.rewrite(b.span(), &b.left, '+', "kiln_add("),
                    ast::BinOpKind::Concat => self.rewrite(b.span(), &b.left, '~', "kiln_concat("),
                    ast::BinOpKind::Mul => self.rewrite(b.span(), &b.left, '*', "kiln_mul("),
                    ast::BinOpKind::Rem => self.rewrite(b.span(), &b.left, '%', "kiln_mod("),
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
                // `(a, b)` is a tuple in Python: wrap it so it prints as one.
                let span = l.span();
                let (start, end) = (span.start_offset as usize, span.end_offset as usize);
                if self.src.as_bytes().get(start) == Some(&b'(') {
                    self.wrap(start, end, "kiln_tuple(");
                }
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

    /// Records `call` (`kiln_xxx(`) before `start` and `)` at `end`.
    fn wrap(&mut self, start: usize, end: usize, call: &'static str) {
        self.edits.push(Edit {
            at: start,
            remove: 0,
            text: call,
            order: 2,
        });
        self.edits.push(Edit {
            at: end,
            remove: 0,
            text: ")",
            order: 0,
        });
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
    fn rewrites_operators_by_span() {
        assert_eq!(rewrite_operators("{{ a - b }}x+y~z", ws()), None);
        assert_eq!(
            rewrite_operators("{{ a * 2 ** 3 }}", ws()).as_deref(),
            Some("{{ kiln_mul(a , 2 ** 3) }}")
        );
        assert_eq!(
            rewrite_operators("{{ a ~ (b ~ c) }}{{ -1 + 2 }}", ws()).as_deref(),
            Some("{{ kiln_concat(a , (kiln_concat(b , c))) }}{{ kiln_add(-1 , 2) }}")
        );
        assert_eq!(
            rewrite_operators("{{ 'x'|safe + (a + b) + t|tojson }}", ws()).as_deref(),
            Some("{{ kiln_add(kiln_add('x'|safe , (kiln_add(a , b))) , t|tojson) }}")
        );
        assert_eq!(
            rewrite_operators("{% set x = f(a+b)[0] + [1] %}", ws()).as_deref(),
            Some("{% set x = kiln_add(f(kiln_add(a,b))[0] , [1]) %}")
        );
    }

    #[test]
    fn markup_add_escapes_the_plain_side() {
        let m = Value::from_safe_string("<b>".into());
        let s = Value::from("\"&'");
        let r = add(&m, &s, 100).unwrap();
        assert_eq!(r.as_str(), Some("<b>&#34;&amp;&#39;"));
        assert!(r.is_safe());
        let r = add(&s, &m, 100).unwrap();
        assert_eq!(r.as_str(), Some("&#34;&amp;&#39;<b>"));
        assert_eq!(
            add(&Value::from(1), &Value::from(true), 100).unwrap(),
            Value::from(2)
        );
        assert!(add(&Value::from("a"), &Value::from(1), 100).is_err());
        assert!(add(&Value::from("aaaa"), &Value::from("bbbb"), 7).is_err());
        assert!(concat(&Value::from("aaaa"), &Value::from(1234), 7).is_err());
    }

    #[test]
    fn mul_repeats_within_caps() {
        assert_eq!(
            mul(&Value::from("ab"), &Value::from(3), 100).unwrap(),
            Value::from("ababab")
        );
        assert_eq!(
            mul(&Value::from(2), &Value::from(1.5), 100).unwrap(),
            Value::from(3.0)
        );
        assert!(mul(&Value::from("ab"), &Value::from(100), 100).is_err());
        assert!(mul(&Value::from(vec![1, 2]), &Value::from(1 << 30), 100).is_err());
        assert!(mul(&Value::from("ab"), &Value::from("c"), 100).is_err());
    }
}
