//! Registry paths: absolute, `/`-separated node names.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// Why a string is not a valid registry path or node name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path does not start with `/`.
    #[error("registry path {0:?} must start with '/'")]
    NotAbsolute(String),
    /// The path has an empty segment (`//` or a trailing `/`).
    #[error("registry path {0:?} has an empty segment ('//' or a trailing '/')")]
    EmptySegment(String),
    /// A segment is `.` or `..`, which ZooKeeper rejects.
    #[error("registry path {0:?} has a '.' or '..' segment")]
    RelativeSegment(String),
    /// The path holds a control character (ZooKeeper rejects `\0` and control characters).
    #[error("registry path {0:?} contains a control character")]
    ControlCharacter(String),
    /// A node name given to [`NodePath::join`] is not a single segment.
    #[error(
        "node name {0:?} must be one non-empty segment without '/', '.', '..' or control characters"
    )]
    BadName(String),
}

/// An absolute registry path such as `/myJob/sharding/0/instance`.
///
/// Paths are relative to the registry's namespace: a ZooKeeper backend applies the namespace as
/// a chroot, an etcd backend as a key prefix, so the same path means the same node everywhere.
/// A valid path is `/` or `/`-separated non-empty segments that are not `.`/`..` and hold no
/// control character. Paths order by their string, so a parent sorts before its children.
///
/// The text is shared: a clone (one per watcher of every event, one per operation naming the
/// node) copies nothing.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodePath(Arc<str>);

impl NodePath {
    /// The root path `/`.
    pub fn root() -> Self {
        static ROOT: OnceLock<Arc<str>> = OnceLock::new();
        Self(Arc::clone(ROOT.get_or_init(|| Arc::from("/"))))
    }

    /// Parses and checks an absolute path.
    pub fn new(path: impl Into<String>) -> Result<Self, PathError> {
        let path = path.into();
        if !path.starts_with('/') {
            return Err(PathError::NotAbsolute(path));
        }
        if path == "/" {
            return Ok(Self::root());
        }
        for segment in path[1..].split('/') {
            if let Err(e) = check_segment(segment) {
                return Err(match e {
                    SegmentProblem::Empty => PathError::EmptySegment(path),
                    SegmentProblem::Relative => PathError::RelativeSegment(path),
                    SegmentProblem::Control => PathError::ControlCharacter(path),
                });
            }
        }
        Ok(Self(Arc::from(path)))
    }

    /// The child of this path called `name`; `name` must be a single valid segment.
    pub fn join(&self, name: &str) -> Result<Self, PathError> {
        if name.contains('/') || check_segment(name).is_err() {
            return Err(PathError::BadName(name.to_owned()));
        }
        Ok(self.child_unchecked(name))
    }

    /// The descendant `self/a/b/…` of segments known to be valid, built in one allocation
    /// (the usual short path is put together on the stack first).
    pub(crate) fn descendant_unchecked(&self, names: &[&str]) -> Self {
        if names.is_empty() {
            return self.clone();
        }
        let base = if self.is_root() { "" } else { &self.0[..] };
        let len = base.len() + names.iter().map(|n| n.len() + 1).sum::<usize>();
        let mut stack = [0u8; 128];
        let mut heap = Vec::new();
        let out: &mut [u8] = if len <= stack.len() {
            &mut stack[..len]
        } else {
            heap.resize(len, 0);
            &mut heap
        };
        out[..base.len()].copy_from_slice(base.as_bytes());
        let mut at = base.len();
        for name in names {
            debug_assert!(
                !name.contains('/') && check_segment(name).is_ok(),
                "bad segment {name:?}"
            );
            out[at] = b'/';
            out[at + 1..at + 1 + name.len()].copy_from_slice(name.as_bytes());
            at += 1 + name.len();
        }
        // Whole strings and `/` put together: always UTF-8.
        match std::str::from_utf8(out) {
            Ok(text) => Self(Arc::from(text)),
            Err(_) => Self::root(),
        }
    }

    /// The child called `name`, which the caller has already checked to be one valid segment.
    pub(crate) fn child_unchecked(&self, name: &str) -> Self {
        self.descendant_unchecked(&[name])
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the root path `/`.
    pub fn is_root(&self) -> bool {
        &*self.0 == "/"
    }

    /// The parent path, or `None` for the root.
    pub fn parent(&self) -> Option<NodePath> {
        if self.is_root() {
            return None;
        }
        let at = self.0.rfind('/').unwrap_or(0);
        Some(if at == 0 {
            Self::root()
        } else {
            Self(Arc::from(&self.0[..at]))
        })
    }

    /// The last segment, or `""` for the root.
    pub fn name(&self) -> &str {
        // A plain byte search from the end (names are short); a `/` byte is never part of a
        // longer UTF-8 sequence, so the cut is at a character boundary.
        match self.0.as_bytes().iter().rposition(|b| *b == b'/') {
            Some(at) => &self.0[at + 1..],
            None => "",
        }
    }

    /// The segments after the root, in order.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        Segments { rest: &self.0[..] }
    }

    /// Orders paths by their segments, as [`NodePath::segments`] compared in turn would, but
    /// in one pass over the bytes: a parent before its children, siblings by name, a subtree
    /// before a sibling whose name extends its root's (`a/x` before `a-b`). Byte order alone
    /// puts `a-b` between `a` and `a/x`, since `-` is below `/`.
    pub fn cmp_segments(&self, other: &NodePath) -> std::cmp::Ordering {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        // A segment's end (`/`) sorts below every byte a segment can hold: paths hold no
        // control characters, so mapping `/` to 0 keeps the order of everything else.
        let rank = |c: u8| if c == b'/' { 0 } else { c };
        match a.iter().zip(b).position(|(x, y)| x != y) {
            Some(i) => rank(a[i]).cmp(&rank(b[i])),
            None => a.len().cmp(&b.len()),
        }
    }

    /// Whether `self` is `other` or one of its ancestors.
    pub fn contains(&self, other: &NodePath) -> bool {
        self.is_root()
            || other.0 == self.0
            || (other.0.starts_with(&*self.0)
                && other.0.as_bytes().get(self.0.len()) == Some(&b'/'))
    }

    /// The segments of `other` below `self`, or `None` if `other` is not under `self`.
    pub fn relative<'a>(&self, other: &'a NodePath) -> Option<impl Iterator<Item = &'a str>> {
        if !self.contains(other) {
            return None;
        }
        let rest = if self.is_root() {
            &other.0[..]
        } else {
            &other.0[self.0.len()..]
        };
        Some(rest.split('/').filter(|s| !s.is_empty()))
    }
}

/// The segments of a path, what `split('/')` gives without its empty pieces. Every watch event
/// is parsed into its segments, and segments are a few bytes long: a plain scan for `/` is
/// several times cheaper there than the general substring search behind `split`.
struct Segments<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        while !self.rest.is_empty() {
            let end = self
                .rest
                .bytes()
                .position(|b| b == b'/')
                .unwrap_or(self.rest.len());
            // `end` is at a `/` (one byte) or the end: both are character boundaries.
            let (segment, after) = self.rest.split_at(end);
            self.rest = after.get(1..).unwrap_or("");
            if !segment.is_empty() {
                return Some(segment);
            }
        }
        None
    }
}

enum SegmentProblem {
    Empty,
    Relative,
    Control,
}

fn check_segment(segment: &str) -> Result<(), SegmentProblem> {
    if segment.is_empty() {
        Err(SegmentProblem::Empty)
    } else if segment == "." || segment == ".." {
        Err(SegmentProblem::Relative)
    } else if segment.chars().any(char::is_control) {
        Err(SegmentProblem::Control)
    } else {
        Ok(())
    }
}

impl fmt::Display for NodePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for NodePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl FromStr for NodePath {
    type Err = PathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for NodePath {
    type Error = PathError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl TryFrom<&str> for NodePath {
    type Error = PathError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<NodePath> for String {
    fn from(p: NodePath) -> String {
        p.0.to_string()
    }
}

impl AsRef<str> for NodePath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A path compares, orders and hashes as its string, so maps keyed by paths can be searched
/// (and ranged over) by `&str`.
impl std::borrow::Borrow<str> for NodePath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> NodePath {
        NodePath::new(s).unwrap()
    }

    #[test]
    fn accepts_root_and_plain_paths() {
        assert!(p("/").is_root());
        assert_eq!(p("/a/b").as_str(), "/a/b");
        assert_eq!(p("/a/b").name(), "b");
        assert_eq!(p("/a/b").parent(), Some(p("/a")));
        assert_eq!(p("/a").parent(), Some(p("/")));
        assert_eq!(p("/").parent(), None);
        assert_eq!(p("/a/b").segments().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(p("/").segments().count(), 0);
        assert_eq!(
            p("/é/ü-x/a").segments().collect::<Vec<_>>(),
            ["é", "ü-x", "a"]
        );
    }

    proptest::proptest! {
        #[test]
        fn segment_order_is_the_order_of_the_segments(
            a in proptest::collection::vec("[-a-c.0é~]{1,3}", 0..4),
            b in proptest::collection::vec("[-a-c.0é~]{1,3}", 0..4),
        ) {
            let path = |s: &[String]| {
                let text = format!("/{}", s.join("/"));
                NodePath::new(text).ok()
            };
            // Segments `.` and `..` are refused: such draws say nothing.
            if let (Some(x), Some(y)) = (path(&a), path(&b)) {
                proptest::prop_assert_eq!(x.cmp_segments(&y), x.segments().cmp(y.segments()));
            }
        }
    }

    #[test]
    fn segment_order_puts_a_subtree_before_a_longer_sibling() {
        assert_eq!(p("/a/x").cmp_segments(&p("/a-b")), std::cmp::Ordering::Less);
        assert_eq!(p("/a").cmp_segments(&p("/a/x")), std::cmp::Ordering::Less);
        assert_eq!(p("/").cmp_segments(&p("/a")), std::cmp::Ordering::Less);
        assert_eq!(
            p("/a/b").cmp_segments(&p("/a/b")),
            std::cmp::Ordering::Equal
        );
        // Byte order disagrees here, which is why the store sorts by segments.
        assert!(p("/a/x") > p("/a-b"));
    }

    #[test]
    fn rejects_malformed_paths() {
        assert!(matches!(NodePath::new("a"), Err(PathError::NotAbsolute(_))));
        assert!(matches!(NodePath::new(""), Err(PathError::NotAbsolute(_))));
        assert!(matches!(
            NodePath::new("/a//b"),
            Err(PathError::EmptySegment(_))
        ));
        assert!(matches!(
            NodePath::new("/a/"),
            Err(PathError::EmptySegment(_))
        ));
        assert!(matches!(
            NodePath::new("/a/../b"),
            Err(PathError::RelativeSegment(_))
        ));
        assert!(matches!(
            NodePath::new("/a\0"),
            Err(PathError::ControlCharacter(_))
        ));
        assert!(matches!(p("/a").join("b/c"), Err(PathError::BadName(_))));
        assert!(matches!(p("/a").join(""), Err(PathError::BadName(_))));
        assert!(matches!(p("/a").join(".."), Err(PathError::BadName(_))));
    }

    #[test]
    fn containment_respects_segment_boundaries() {
        assert!(p("/a").contains(&p("/a")));
        assert!(p("/a").contains(&p("/a/b")));
        assert!(!p("/a").contains(&p("/ab")));
        assert!(p("/").contains(&p("/ab")));
        assert_eq!(
            p("/a").relative(&p("/a/b/c")).unwrap().collect::<Vec<_>>(),
            ["b", "c"]
        );
        assert_eq!(
            p("/").relative(&p("/a")).unwrap().collect::<Vec<_>>(),
            ["a"]
        );
        assert!(p("/a").relative(&p("/b")).is_none());
        assert_eq!(p("/").join("x").unwrap(), p("/x"));
    }
}
