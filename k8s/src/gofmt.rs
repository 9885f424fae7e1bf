//! Values as Go's `fmt` prints them where the apiserver puts them in a message.

use std::collections::BTreeMap;

use crate::json::go_quote;

/// Go's `%#v` of the `*user.DefaultInfo` an impersonation 400 prints (`fmt` sorts a map's keys).
pub fn user_info_sharp_v(
    name: &str,
    uid: &str,
    groups: Option<&[String]>,
    extra: Option<&BTreeMap<String, Vec<String>>>,
) -> String {
    let list = |v: &[String]| v.iter().map(|s| go_quote(s)).collect::<Vec<_>>().join(", ");
    let groups = match groups {
        None => "[]string(nil)".to_owned(),
        Some(g) => format!("[]string{{{}}}", list(g)),
    };
    let extra = match extra {
        None => "map[string][]string(nil)".to_owned(),
        Some(m) => {
            let entries: Vec<String> =
                m.iter().map(|(k, v)| format!("{}:[]string{{{}}}", go_quote(k), list(v))).collect();
            format!("map[string][]string{{{}}}", entries.join(", "))
        }
    };
    format!(
        "&user.DefaultInfo{{Name:{}, UID:{}, Groups:{groups}, Extra:{extra}}}",
        go_quote(name),
        go_quote(uid)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_like_go() {
        assert_eq!(
            user_info_sharp_v("", "u", None, None),
            r#"&user.DefaultInfo{Name:"", UID:"u", Groups:[]string(nil), Extra:map[string][]string(nil)}"#
        );
        let extra = BTreeMap::from([("b".to_owned(), vec![]), ("a".to_owned(), vec!["x\"".to_owned()])]);
        assert_eq!(
            user_info_sharp_v("n", "", Some(&["g".to_owned()]), Some(&extra)),
            r#"&user.DefaultInfo{Name:"n", UID:"", Groups:[]string{"g"}, Extra:map[string][]string{"a":[]string{"x\""}, "b":[]string{}}}"#
        );
    }
}
