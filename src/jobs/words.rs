//! Splitting a command line into arguments the way a POSIX shell would quote them, without a
//! shell: no expansion, no redirection, no variables.

/// Why a command line cannot be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A quote is opened and never closed.
    #[error("unterminated {0} quote")]
    UnterminatedQuote(&'static str),
    /// The line ends with a lone backslash.
    #[error("the command line ends with a lone backslash")]
    TrailingBackslash,
    /// There is no word at all.
    #[error("the command line is empty")]
    Empty,
}

/// Splits `line` into words: whitespace separates words; `'...'` is literal; `"..."` is
/// literal except that a backslash escapes `"`, `\`, `$` and `` ` ``; outside quotes a
/// backslash escapes any character. Nothing else is special.
///
/// ```
/// # use shardjob::jobs::split_command_line;
/// let words = split_command_line(r#"python3 -c 'print("hi")' "a b" c\ d"#).unwrap();
/// assert_eq!(words, ["python3", "-c", r#"print("hi")"#, "a b", "c d"]);
/// ```
pub fn split_command_line(line: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(SplitError::UnterminatedQuote("single")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(SplitError::UnterminatedQuote("double")),
                        },
                        Some(c) => word.push(c),
                        None => return Err(SplitError::UnterminatedQuote("double")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err(SplitError::TrailingBackslash),
            },
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err(SplitError::Empty);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<String> {
        split_command_line(s).unwrap()
    }

    #[test]
    fn plain_words_and_whitespace() {
        assert_eq!(split("  echo   a\tb\nc "), ["echo", "a", "b", "c"]);
    }

    #[test]
    fn quotes() {
        assert_eq!(
            split(r#"a 'b c' "d e" f"g"'h'"#),
            ["a", "b c", "d e", "fgh"]
        );
        assert_eq!(split(r#"'' "" x"#), ["", "", "x"]);
        assert_eq!(split(r#""a \"b\" \\ \$ \n""#), [r#"a "b" \ $ \n"#]);
        assert_eq!(split(r#"'a\b'"#), [r"a\b"]);
        assert_eq!(split(r"a\ b \'c"), ["a b", "'c"]);
    }

    #[test]
    fn no_shell_meaning() {
        assert_eq!(split("echo $HOME; rm *"), ["echo", "$HOME;", "rm", "*"]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            split_command_line("a 'b"),
            Err(SplitError::UnterminatedQuote("single"))
        );
        assert_eq!(
            split_command_line("a \"b"),
            Err(SplitError::UnterminatedQuote("double"))
        );
        assert_eq!(
            split_command_line("a \\"),
            Err(SplitError::TrailingBackslash)
        );
        assert_eq!(split_command_line("   "), Err(SplitError::Empty));
    }
}
