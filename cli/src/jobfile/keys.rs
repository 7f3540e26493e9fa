//! Key names: Spring's relaxed binding and "did you mean".
//!
//! Spring Boot binds `regCenter`, `reg-center` and `reg_center` to the same property. shardjob
//! accepts exactly these three spellings of every `elasticjob.*` key (camelCase as ElasticJob
//! writes it, kebab-case, snake_case); any other spelling (`regcenter`, `RegCenter`) is an
//! unknown key, refused with the nearest known name, so a typo never falls back silently.

/// The camelCase name `written` stands for, if it is one of the three spellings of a name in
/// `known`.
pub fn relaxed<'k>(written: &str, known: &[&'k str]) -> Option<&'k str> {
    known.iter().copied().find(|name| {
        *name == written || spelled(name, '-') == written || spelled(name, '_') == written
    })
}

/// `camelCase` spelled with `sep` between lower-case words (`camel-case`).
pub fn spelled(camel: &str, sep: char) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push(sep);
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The known name nearest to `written` when it is near enough to be a typo of it (compared
/// without case, `-` or `_`).
pub fn suggest<'k>(written: &str, known: &[&'k str]) -> Option<&'k str> {
    let folded = fold(written);
    known
        .iter()
        .copied()
        .map(|name| (distance(&folded, &fold(name)), name))
        .filter(|(d, name)| *d <= (name.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// " (did you mean `x`?)" or nothing.
pub fn did_you_mean(written: &str, known: &[&str]) -> String {
    match suggest(written, known) {
        Some(name) => format!(" (did you mean `{name}`?)"),
        None => String::new(),
    }
}

fn fold(s: &str) -> Vec<char> {
    s.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Levenshtein distance.
fn distance(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + cost);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["regCenter", "jobs", "serverLists", "shardingTotalCount"];

    #[test]
    fn three_spellings_bind_and_others_do_not() {
        for k in ["regCenter", "reg-center", "reg_center"] {
            assert_eq!(relaxed(k, KNOWN), Some("regCenter"), "{k}");
        }
        assert_eq!(
            relaxed("sharding-total-count", KNOWN),
            Some("shardingTotalCount")
        );
        for k in ["regcenter", "RegCenter", "reg-Center", "regCentre"] {
            assert_eq!(relaxed(k, KNOWN), None, "{k}");
        }
    }

    #[test]
    fn typos_get_the_nearest_name() {
        assert_eq!(suggest("regcenter", KNOWN), Some("regCenter"));
        assert_eq!(suggest("server-list", KNOWN), Some("serverLists"));
        assert_eq!(
            suggest("shardingTotlCount", KNOWN),
            Some("shardingTotalCount")
        );
        assert_eq!(suggest("completelyDifferent", KNOWN), None);
        assert_eq!(
            did_you_mean(
                "script.timeout.miliseconds",
                &["script.timeout.milliseconds"]
            ),
            " (did you mean `script.timeout.milliseconds`?)"
        );
        assert_eq!(distance(&fold("kitten"), &fold("sitting")), 3);
    }
}
