//! Label selectors: an independent port of apimachinery `labels/selector.go` (lexer, recursive-descent parser,
//! `NewRequirement` validation and `Requirement.Matches`), including its quirks:
//!
//! - `k in ()` parses as `k in ("")` (`parseValues`, case `ClosedParToken`), and `(a,)`/`(,a)` add `""`;
//! - `in` and `notin` are identifiers wherever a value or key is expected;
//! - a NUL byte reads as end of input (the lexer's `read` returns 0 for both);
//! - values of `in`/`notin` are a sorted set; `!=`/`notin` match absent labels; `>`/`<` need integers.

use std::fmt;

use super::lexer::{Lexer, Token};
use super::validation::{aggregate, field_invalid, label_value_errors, qualified_name_errors};

// === impl Operator ===

/// `selection.Operator` as used by label requirements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// `binaryOperators`, printed in "expected:" messages with `selection.Operator` spellings.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

// === impl Requirement ===

/// One `key op values` term. `values` is sorted and deduplicated (`sets.String.List()`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// `NewRequirement`: the aggregated field errors, or the requirement.
    fn new(key: String, op: Operator, values: Vec<String>) -> Result<Self, String> {
        let mut errs = Vec::new();
        let key_errs = qualified_name_errors(&key);
        if !key_errs.is_empty() {
            errs.push(field_invalid("key", &key, &key_errs.join("; ")));
        }
        match op {
            Operator::In | Operator::NotIn if values.is_empty() => errs.push(
                "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
                    .to_string(),
            ),
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                        go_string_slice(&values)
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(field_invalid(
                            &format!("values[{i}]"),
                            v,
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = label_value_errors(v);
            if !value_errs.is_empty() {
                errs.push(field_invalid(&format!("values[{i}][{key}]"), v, &value_errs.join("; ")));
            }
        }
        match aggregate(&errs) {
            Some(msg) => Err(msg),
            None => Ok(Requirement { key, op, values }),
        }
    }

    fn has_value(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }

    /// `Requirement.Matches`.
    fn matches(&self, labels: &serde_json::Map<String, serde_json::Value>) -> bool {
        // Labels are strings in every valid object; anything else is treated as absent.
        let lookup = labels.get(&self.key).and_then(|v| v.as_str());
        match self.op {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                lookup.is_some_and(|v| self.has_value(v))
            }
            Operator::NotIn | Operator::NotEquals => lookup.is_none_or(|v| !self.has_value(v)),
            Operator::Exists => lookup.is_some(),
            Operator::DoesNotExist => lookup.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(actual), [wanted]) = (lookup, self.values.as_slice()) else { return false };
                match (actual.parse::<i64>(), wanted.parse::<i64>()) {
                    (Ok(a), Ok(w)) => {
                        if self.op == Operator::GreaterThan {
                            a > w
                        } else {
                            a < w
                        }
                    }
                    _ => false,
                }
            }
        }
    }
}

/// `%#v` of a `[]string`, as `field.Invalid` prints a slice value.
fn go_string_slice(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| super::validation::go_quote(v)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

impl fmt::Display for Requirement {
    /// `Requirement.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (op, paren) = match self.op {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => ("=", false),
            Operator::DoubleEquals => ("==", false),
            Operator::NotEquals => ("!=", false),
            Operator::In => (" in ", true),
            Operator::NotIn => (" notin ", true),
            Operator::GreaterThan => (">", false),
            Operator::LessThan => ("<", false),
        };
        f.write_str(op)?;
        if paren {
            f.write_str("(")?;
        }
        f.write_str(&self.values.join(","))?;
        if paren {
            f.write_str(")")?;
        }
        Ok(())
    }
}

// === impl Parser ===

/// Which context a token is read in: in `Values`, `in`/`notin` are identifiers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(input: &str) -> Self {
        let mut lexer = Lexer { s: input.as_bytes(), pos: 0 };
        let mut items = Vec::new();
        loop {
            let (tok, lit) = lexer.lex();
            items.push((tok, lit));
            if tok == Token::EndOfString {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, index: usize, ctx: Context) -> (Token, String) {
        // The token list always ends with EndOfString and the grammar never reads past it; reading past
        // it anyway yields EndOfString rather than a panic.
        let (tok, lit) = self.items.get(index).cloned().unwrap_or((Token::EndOfString, String::new()));
        match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => (Token::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.item(self.position, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        self.position += 1;
        self.item(self.position - 1, ctx)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r =
                        self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!("found '{l2}', expected: identifier after ','"));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => return Err(format!("found '{lit}', expected: !, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = op {
            return Requirement::new(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let mut values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        values.sort();
        values.dedup();
        Requirement::new(key, op, values)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let errs = qualified_name_errors(&lit);
        if !errs.is_empty() {
            return Err(field_invalid("<nil>", &lit, &errs.join("; ")));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                let (closing, _) = self.consume(Context::Values);
                if closing != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    values.push(lit);
                    let (next, next_lit) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(format!("found '{next_lit}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if next == Token::ClosedPar {
                        values.push(String::new());
                        return Ok(values);
                    }
                    if next == Token::Comma {
                        values.push(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if matches!(tok, Token::EndOfString | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(vec![lit]);
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

// === impl LabelSelector ===

/// A parsed label selector: the AND of its requirements, sorted by key like `labels.Parse`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses a selector string. `Err` carries the message the apiserver puts in its 400 Status.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Parser::new(s).parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// True when the selector does not restrict anything (empty or blank input).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// True when every requirement matches the object's `metadata.labels`.
    pub fn matches(&self, labels: &serde_json::Map<String, serde_json::Value>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for LabelSelector {
    /// `internalSelector.String()`: the canonical form, requirements joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}
