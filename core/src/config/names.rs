//! Names: job names and namespaces under both registries' rules, and the nearest known name
//! to a typo.

use super::{DELIMITER, MAX_JOB_NAME_LEN, Problem};

/// Checks a job name: a registry node name under both registries' rules (ZooKeeper refuses
/// more characters than etcd), free of characters that would hide or reorder text in logs,
/// and no `@-@` (task ids use it).
pub fn check_job_name(name: &str) -> Result<(), Problem> {
    let bad = |why: &str| Err(Problem::BadJobName(why.to_owned()));
    if name.trim().is_empty() {
        return Err(Problem::Empty);
    }
    if name.len() > MAX_JOB_NAME_LEN {
        return bad(&format!("is longer than {MAX_JOB_NAME_LEN} bytes"));
    }
    if name.contains('/') {
        return bad("must not contain '/' (it names a registry node)");
    }
    if name == "." || name == ".." {
        return bad("must not be '.' or '..'");
    }
    if let Err(why) = check_name_chars(name) {
        return bad(&why);
    }
    if name.contains(DELIMITER) {
        return bad("must not contain '@-@' (it separates the parts of a task id)");
    }
    Ok(())
}

/// The namespace ZooKeeper keeps for itself (`/zookeeper`: quotas, config).
pub const ZOOKEEPER_SYSTEM_NODE: &str = "zookeeper";

/// A namespace (a registry's root for shardjob's nodes) that no registry can hold safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad namespace {namespace:?}: {reason}")]
pub struct NamespaceError {
    /// The namespace as given.
    pub namespace: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Checks a namespace (`ns` or `a/b`; slashes at the ends are ignored) against both
/// registries' rules: every segment a valid node name (the characters of
/// [`check_job_name`]), no empty, `.` or `..` segment, and not under ZooKeeper's own
/// `/zookeeper` node.
pub fn check_namespace(namespace: &str) -> Result<(), NamespaceError> {
    let fail = |reason: String| {
        Err(NamespaceError {
            namespace: namespace.to_owned(),
            reason,
        })
    };
    let trimmed = namespace.trim_matches('/');
    if trimmed.is_empty() {
        return fail("it is empty".to_owned());
    }
    for segment in trimmed.split('/') {
        if segment.is_empty() {
            return fail("it has an empty segment ('//')".to_owned());
        }
        if segment == "." || segment == ".." {
            return fail("a segment is '.' or '..', which ZooKeeper refuses".to_owned());
        }
        if let Err(why) = check_name_chars(segment) {
            return fail(why);
        }
    }
    if trimmed.split('/').next() == Some(ZOOKEEPER_SYSTEM_NODE) {
        return fail(format!(
            "/{ZOOKEEPER_SYSTEM_NODE} is ZooKeeper's own node (quotas and configuration): \
             choose another namespace"
        ));
    }
    Ok(())
}

/// Refuses the characters a registry node name must not hold, and those that hide or reorder
/// text where names are printed. `Err` says which character and why.
fn check_name_chars(name: &str) -> Result<(), String> {
    for c in name.chars() {
        let code = u32::from(c);
        let why = if c.is_whitespace() {
            "whitespace"
        } else if c.is_control() {
            "a control character"
        } else if matches!(code, 0x202A..=0x202E | 0x2066..=0x2069 | 0x200E | 0x200F | 0x061C) {
            "a bidirectional control character (it can reorder what logs show)"
        } else if matches!(
            code,
            0x00AD | 0x034F | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180E | 0x200B..=0x200D
                | 0x2060..=0x2064 | 0x3164 | 0xFEFF | 0xFFA0
        ) {
            "an invisible character (it can make two names look the same)"
        } else if matches!(code, 0xE000..=0xF8FF | 0xFFF0..=0xFFFF) || code > 0xFFFF {
            // ZooKeeper checks UTF-16 units: private use, specials, and the surrogates every
            // character beyond U+FFFF (most emoji) is written with.
            "a character ZooKeeper refuses in node names (private use, specials, or beyond \
             U+FFFF such as most emoji)"
        } else {
            continue;
        };
        return Err(format!("must not contain {why}: U+{code:04X}"));
    }
    Ok(())
}

/// The name in `known` nearest to `written`, when `written` looks like a typo of it (a small
/// edit distance, ignoring case, `-` and `_`).
pub fn nearest_name<'k>(written: &str, known: &[&'k str]) -> Option<&'k str> {
    let fold = |s: &str| -> Vec<char> {
        s.chars()
            .filter(|c| *c != '-' && *c != '_')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let written = fold(written);
    known
        .iter()
        .copied()
        .map(|name| (edit_distance(&written, &fold(name)), name))
        .filter(|(d, name)| *d <= (name.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// The Levenshtein distance of two strings.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(prev + usize::from(ca != cb));
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}
