//! Where a key sits in a YAML text.
//!
//! serde_yaml_ng's [`Value`](serde_yaml_ng::Value) keeps no positions, but its errors do: an
//! error raised while a node is read carries that node's line and column. [`locate`] walks the
//! text with a deserializer that reads only down the given path and fails on purpose at the
//! key it looks for, so the failure's location is the key's. The text is read once more per
//! located problem, by the same parser that read the file (no second YAML parser to disagree
//! with the first).

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a path into a YAML document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The value of a mapping key, matched by its text as written.
    Key(String),
    /// An element of a sequence.
    Index(usize),
}

/// A place in the text: line and column, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// The marker of the planted failure, so a real YAML error is never taken for the key's place.
const HERE: &str = "\u{0}shardjob-located\u{0}";

/// The location of the node at `path` (for a last [`Step::Key`], the key itself), or `None`
/// when the path is not in the text.
pub fn locate(text: &str, path: &[Step]) -> Option<Location> {
    if path.is_empty() {
        return None;
    }
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let walked = Walk { path }.deserialize(de);
    match walked {
        Ok(()) => None,
        Err(e) if e.to_string().contains(HERE) => e.location().map(|l| Location {
            line: l.line(),
            column: l.column(),
        }),
        Err(_) => None,
    }
}

struct Walk<'p> {
    path: &'p [Step],
}

impl Walk<'_> {
    /// Fails when this node is the target (the path ends in an index).
    fn here<E: de::Error>(&self) -> Result<(), E> {
        if self.path.is_empty() {
            Err(E::custom(HERE))
        } else {
            Ok(())
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.here()?;
        let Some((Step::Key(want), rest)) = self.path.split_first() else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        while let Some(hit) = map.next_key_seed(KeySeed {
            want,
            last: rest.is_empty(),
        })? {
            if hit {
                map.next_value_seed(Walk { path: rest })?;
                // Skip the rest (a found target has already failed).
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(());
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.here()?;
        let Some((Step::Index(want), rest)) = self.path.split_first() else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        let mut i = 0;
        loop {
            if i == *want {
                seq.next_element_seed(Walk { path: rest })?;
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
            if i > *want {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                return Ok(());
            }
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.here()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.here()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.here()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.here()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.here()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.here()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.here()
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        self.here()?;
        // A tagged node (`!Tag value`): look no further.
        let (IgnoredAny, variant) = data.variant::<IgnoredAny>()?;
        de::VariantAccess::newtype_variant::<IgnoredAny>(variant)?;
        Ok(())
    }
}

/// Reads a key; `true` when it is the wanted one (and fails there when it is the last step).
struct KeySeed<'a> {
    want: &'a str,
    last: bool,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = bool;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        let hit = key == self.want;
        if hit && self.last {
            return Err(E::custom(HERE));
        }
        Ok(hit)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Step {
        Step::Key(k.to_owned())
    }

    #[test]
    fn finds_keys_in_nested_mappings_and_lists() {
        let text = "elasticjob:\n  regcenter:\n    serverLists: a:1\n  jobs:\n    j:\n      props:\n        script.timeout.miliseconds: 3\n";
        assert_eq!(
            locate(text, &[key("elasticjob"), key("regcenter")]),
            Some(Location { line: 2, column: 3 })
        );
        assert_eq!(
            locate(
                text,
                &[
                    key("elasticjob"),
                    key("jobs"),
                    key("j"),
                    key("props"),
                    key("script.timeout.miliseconds")
                ]
            ),
            Some(Location { line: 7, column: 9 })
        );
        let list = "- jobName: a\n  shardingTotalCount: 1\n- jobName: b\n  shardingTotlCount: 1\n";
        assert_eq!(
            locate(list, &[Step::Index(1), key("shardingTotlCount")]),
            Some(Location { line: 4, column: 3 })
        );
        assert_eq!(
            locate(list, &[Step::Index(1)]),
            Some(Location { line: 3, column: 3 })
        );
        assert_eq!(locate(list, &[Step::Index(2), key("x")]), None);
        assert_eq!(locate(text, &[key("nope")]), None);
        assert_eq!(locate("a: [", &[key("b")]), None);
        // Flow style too.
        assert_eq!(
            locate("{a: 1, bb: {c: 2}}", &[key("bb"), key("c")]),
            Some(Location {
                line: 1,
                column: 13
            })
        );
    }
}
