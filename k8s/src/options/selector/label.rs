//! Label selectors: apimachinery's `labels.Parse` (lexer, parser, validation) and `Requirement.Matches`,
//! reproduced token for token so that accepted inputs, the parsed meaning and every error message match
//! (`k8s.io/apimachinery/pkg/labels/selector.go`).

use std::fmt;

use crate::status::{FieldError, aggregate_message};

use super::Selectable;
use super::validation::{label_value_errors, qualified_name_errors};

/// `binaryOperators` joined, as printed in "expected:" messages.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

/// A label selector operator (`selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One requirement: `key op values`. Values are sorted and deduplicated (Go's `sets.String.List()`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
    /// The integer operand of `gt`/`lt` (validated at parse time).
    int_value: i64,
}

/// A parsed label selector: the AND of its requirements, sorted by key. Empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

/// Why a label selector failed to parse; the message is apimachinery's, reaching clients as a 400.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LabelSelectorError(pub String);

// === impl Requirement ===

impl Requirement {
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.op
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `Requirement.Matches` against a label lookup.
    pub fn matches_value(&self, label: Option<&str>) -> bool {
        match self.op {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                label.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            Operator::NotIn | Operator::NotEquals => {
                label.is_none_or(|v| !self.values.iter().any(|x| x == v))
            }
            Operator::Exists => label.is_some(),
            Operator::DoesNotExist => label.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                // Go: strconv.ParseInt(v, 10, 64); values that are not integers never match.
                let Some(v) = label.and_then(parse_go_int64) else { return false };
                if self.op == Operator::GreaterThan { v > self.int_value } else { v < self.int_value }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// `Requirement.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.op {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
        };
        f.write_str(op)?;
        let set = matches!(self.op, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        f.write_str(&self.values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)` acceptance: optional sign, ASCII digits, in range.
pub fn parse_go_int64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

// === impl LabelSelector ===

impl LabelSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// `labels.Parse`: the string grammar of `?labelSelector=`.
    pub fn parse(input: &str) -> Result<Self, LabelSelectorError> {
        let mut p = Parser { items: lex(input), pos: 0 };
        let mut reqs = p.parse().map_err(LabelSelectorError)?;
        // sort.Sort(ByKey): insertion sort for the short lists real selectors are, i.e. stable.
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.reqs
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches<O: Selectable + ?Sized>(&self, obj: &O) -> bool {
        self.reqs.iter().all(|r| r.matches_value(obj.label(&r.key)))
    }

    /// Matching against any label lookup (for callers without a [`Selectable`]).
    pub fn matches_with<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| r.matches_value(lookup(&r.key)))
    }

    /// `RequiresExactMatch`: the single value the first requirement on `label` pins, if it does.
    pub fn exact(&self, label: &str) -> Option<&str> {
        let r = self.reqs.iter().find(|r| r.key == label)?;
        match r.op {
            Operator::Equals | Operator::DoubleEquals | Operator::In if r.values.len() == 1 => {
                Some(&r.values[0])
            }
            _ => None,
        }
    }
}

impl fmt::Display for LabelSelector {
    /// `internalSelector.String()`: requirements joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

// === lexer ===

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn string_to_token(s: &[u8]) -> Option<Tok> {
    Some(match s {
        b")" => Tok::ClosedPar,
        b"," => Tok::Comma,
        b"!" => Tok::DoesNotExist,
        b"==" => Tok::DoubleEquals,
        b"=" => Tok::Equals,
        b">" => Tok::GreaterThan,
        b"in" => Tok::In,
        b"<" => Tok::LessThan,
        b"!=" => Tok::NotEquals,
        b"notin" => Tok::NotIn,
        b"(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Go's `Lexer`, byte by byte. A NUL byte reads like the end of input (Go's `read` returns 0 for both).
struct Lexer<'a> {
    s: &'a [u8],
    src: &'a str,
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos -= 1;
    }

    /// The text between byte offsets; always at ASCII or NUL boundaries, so valid UTF-8.
    fn text(&self, from: usize, to: usize) -> String {
        self.src.get(from..to).unwrap_or_default().to_owned()
    }

    fn lex(&mut self) -> (Tok, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Tok::EndOfString, String::new());
        }
        self.unread();
        if is_special(ch) { self.scan_special() } else { self.scan_identifier() }
    }

    fn scan_identifier(&mut self) -> (Tok, String) {
        let start = self.pos;
        let end;
        loop {
            let before = self.pos;
            let ch = self.read();
            if ch == 0 {
                // End of input, or a NUL byte (consumed, like Go's lexer does).
                end = before;
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                end = self.pos;
                break;
            }
        }
        let lit = self.text(start, end);
        (string_to_token(lit.as_bytes()).unwrap_or(Tok::Identifier), lit)
    }

    fn scan_special(&mut self) -> (Tok, String) {
        let start = self.pos;
        let mut last: Option<(Tok, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.unread();
                break;
            }
            match string_to_token(&self.s[start..self.pos]) {
                Some(tok) => last = Some((tok, self.pos)),
                None if last.is_some() => {
                    self.unread();
                    break;
                }
                None => {}
            }
        }
        match last {
            Some((tok, end)) => (tok, self.text(start, end)),
            // Unreachable in practice: every single special character is a token.
            None => (Tok::EndOfString, String::new()),
        }
    }
}

fn lex(input: &str) -> Vec<(Tok, String)> {
    let mut l = Lexer { s: input.as_bytes(), src: input, pos: 0 };
    let mut items = Vec::new();
    loop {
        let item = l.lex();
        let end = item.0 == Tok::EndOfString;
        items.push(item);
        if end {
            return items;
        }
    }
}

// === parser ===

/// Go's `ParserContext`: in `Values` context `in`/`notin` read as identifiers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    /// Always ends with `EndOfString`.
    items: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn at(&self, i: usize, ctx: Ctx) -> (Tok, String) {
        let (tok, lit) =
            self.items.get(i).or(self.items.last()).cloned().unwrap_or((Tok::EndOfString, String::new()));
        match tok {
            Tok::In | Tok::NotIn if ctx == Ctx::Values => (Tok::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.at(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let item = self.at(self.pos, ctx);
        // Never run past the final EndOfString (Go would index out of range; it cannot happen there).
        if self.pos < self.items.len() - 1 {
            self.pos += 1;
        }
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r =
                        self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::EndOfString => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!("found '{l2}', expected: identifier after ','"));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::EndOfString => return Ok(reqs),
                _ => return Err(format!("found '{lit}', expected: !, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = op {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, op, values)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let errs = qualified_name_errors(&lit);
        if !errs.is_empty() {
            // validateLabelKey(literal, p.path) with a nil path: the field prints as "<nil>".
            return Err(FieldError::invalid("<nil>", &lit, &errs.join("; ")).to_string());
        }
        let (t, _) = self.lookahead(Ctx::Values);
        if (t == Tok::EndOfString || t == Tok::Comma) && op != Some(Operator::DoesNotExist) {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let set = self.parse_identifiers_list()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut set: Vec<String> = Vec::new();
        let insert = |set: &mut Vec<String>, v: String| {
            if !set.contains(&v) {
                set.push(v);
            }
        };
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Identifier => {
                    insert(&mut set, lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        insert(&mut set, String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        insert(&mut set, String::new());
                        return Ok(set);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        insert(&mut set, String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::EndOfString || tok == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Identifier {
            return Ok(vec![lit]);
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

/// `NewRequirement` as called by the parser (the key was already validated; values are a set).
fn new_requirement(key: String, op: Operator, mut values: Vec<String>) -> Result<Requirement, String> {
    values.sort();
    values.dedup();
    let mut errs: Vec<FieldError> = Vec::new();
    let mut int_value = 0;
    if matches!(op, Operator::GreaterThan | Operator::LessThan) {
        for (i, v) in values.iter().enumerate() {
            match parse_go_int64(v) {
                Some(n) => int_value = n,
                None => errs.push(FieldError::invalid(
                    &format!("values[{i}]"),
                    v,
                    "for 'Gt', 'Lt' operators, the value must be an integer",
                )),
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let problems = label_value_errors(v);
        if !problems.is_empty() {
            errs.push(FieldError::invalid(&format!("values[{i}][{key}]"), v, &problems.join("; ")));
        }
    }
    if errs.is_empty() {
        Ok(Requirement { key, op, values, int_value })
    } else {
        Err(aggregate_message(&errs))
    }
}

#[cfg(test)]
#[path = "label_tests.rs"]
mod tests;
