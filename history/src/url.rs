//! Where the history goes: a database URL of shardjob's own (`sqlite://path`,
//! `postgres://user:pass@host:port/db`, `mysql://…` or `mariadb://…`) or the JDBC URL of
//! ElasticJob's Spring Boot keys (`spring.datasource.url`, with `username` and `password`
//! beside it), translated for the three databases shardjob writes to.

use std::fmt;

/// The SQL dialect of a history database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// SQLite (a file): ElasticJob's SQL92 table forms.
    Sqlite,
    /// PostgreSQL: ElasticJob's PostgreSQL forms (`BOOLEAN` `is_success`).
    Postgres,
    /// MySQL or MariaDB: ElasticJob's MySQL forms (`auto_id` primary keys, InnoDB).
    MySql,
}

impl Dialect {
    /// The dialect's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "SQLite",
            Dialect::Postgres => "PostgreSQL",
            Dialect::MySql => "MySQL/MariaDB",
        }
    }
}

/// A URL that cannot be used for the history.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// An empty URL.
    #[error("the history database URL is empty: give sqlite://path, postgres://… or mysql://…")]
    Empty,
    /// A scheme shardjob does not write to.
    #[error(
        "{url:?}: shardjob writes the history to SQLite (sqlite://path), PostgreSQL \
         (postgres://user:pass@host:port/db) or MySQL/MariaDB (mysql://user:pass@host:port/db), \
         not to {what}"
    )]
    Unsupported {
        /// The URL, without its password.
        url: String,
        /// What it names.
        what: String,
    },
    /// A JDBC URL whose form is not understood.
    #[error("{url:?}: {why}")]
    Malformed {
        /// The URL, without its password.
        url: String,
        /// What is wrong and what to write instead.
        why: String,
    },
}

/// A history database: its dialect, the URL handed to the driver, and the credentials given
/// beside it (ElasticJob's `spring.datasource.username/password`).
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    dialect: Dialect,
    url: String,
    username: Option<String>,
    password: Option<String>,
    /// JDBC parameters that have no meaning here (said once, by the caller).
    ignored: Vec<String>,
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseUrl")
            .field("dialect", &self.dialect)
            .field("url", &redact(&self.url))
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for DatabaseUrl {
    /// The URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.url))
    }
}

impl DatabaseUrl {
    /// Parses shardjob's own form: `sqlite://path` (or `sqlite:path`, `sqlite::memory:`),
    /// `postgres://` / `postgresql://`, `mysql://` / `mariadb://`, with the driver's query
    /// options (`?sslmode=require`, `?ssl-mode=…`).
    pub fn parse(url: &str) -> Result<DatabaseUrl, UrlError> {
        let url = url.trim();
        if url.is_empty() {
            return Err(UrlError::Empty);
        }
        let (scheme, rest) = match url.split_once(':') {
            Some(parts) => parts,
            None => {
                return Err(UrlError::Malformed {
                    url: redact(url),
                    why: "no scheme: write sqlite://path, postgres://… or mysql://…".to_owned(),
                });
            }
        };
        let (dialect, url) = match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => (Dialect::Sqlite, url.to_owned()),
            "postgres" | "postgresql" => (Dialect::Postgres, url.to_owned()),
            "mysql" => (Dialect::MySql, url.to_owned()),
            "mariadb" => (Dialect::MySql, format!("mysql:{rest}")),
            "jdbc" => {
                return Err(UrlError::Malformed {
                    url: redact(url),
                    why: "a JDBC URL belongs in spring.datasource.url (with username and \
                          password beside it); tracing.url takes sqlite://, postgres:// or \
                          mysql://"
                        .to_owned(),
                });
            }
            other => {
                return Err(UrlError::Unsupported {
                    url: redact(url),
                    what: format!("{other:?}"),
                });
            }
        };
        Ok(DatabaseUrl {
            dialect,
            url,
            username: None,
            password: None,
            ignored: Vec::new(),
        })
    }

    /// Translates the JDBC URL of ElasticJob's `spring.datasource.url`:
    /// `jdbc:mysql://host:port/db?…` and `jdbc:mariadb://…` (`useSSL`/`sslMode` kept as the
    /// driver's `ssl-mode`), `jdbc:postgresql://host:port/db?…` (`sslmode` kept) and
    /// `jdbc:sqlite:path`. Other JDBC parameters have no meaning here: they are listed by
    /// [`DatabaseUrl::ignored_parameters`]. Other databases (H2, Oracle, SQL Server, DB2…)
    /// are refused.
    pub fn from_jdbc(
        jdbc: &str,
        username: Option<&str>,
        password: Option<&str>,
    ) -> Result<DatabaseUrl, UrlError> {
        let jdbc = jdbc.trim();
        let shown = redact(jdbc);
        let Some(rest) = strip_prefix_ci(jdbc, "jdbc:") else {
            return Err(UrlError::Malformed {
                url: shown,
                why: "spring.datasource.url is not a JDBC URL (jdbc:mysql://…, \
                      jdbc:postgresql://…, jdbc:sqlite:…)"
                    .to_owned(),
            });
        };
        let (sub, body) = rest.split_once(':').unwrap_or((rest, ""));
        let sub = sub.to_ascii_lowercase();
        let mut ignored = Vec::new();
        let url = match sub.as_str() {
            "sqlite" => {
                if body.is_empty() {
                    return Err(UrlError::Malformed {
                        url: shown,
                        why: "no file after jdbc:sqlite: (write jdbc:sqlite:path/to/file.db)"
                            .to_owned(),
                    });
                }
                let (path, params) = body.split_once('?').unwrap_or((body, ""));
                ignored.extend(
                    params
                        .split('&')
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned),
                );
                if path == ":memory:" {
                    "sqlite::memory:".to_owned()
                } else {
                    format!("sqlite://{path}")
                }
            }
            "mysql" | "mariadb" | "postgresql" => {
                let Some(body) = body.strip_prefix("//") else {
                    return Err(UrlError::Malformed {
                        url: shown,
                        why: format!("expected jdbc:{sub}://host:port/database"),
                    });
                };
                let (hosts, params) = body.split_once('?').unwrap_or((body, ""));
                if hosts.contains(',') {
                    return Err(UrlError::Malformed {
                        url: shown,
                        why: "several hosts (fail-over JDBC URLs) are not supported: name one \
                              host"
                            .to_owned(),
                    });
                }
                let mut kept = Vec::new();
                for param in params.split('&').filter(|p| !p.is_empty()) {
                    let (key, value) = param.split_once('=').unwrap_or((param, ""));
                    match (sub.as_str(), key.to_ascii_lowercase().as_str()) {
                        ("postgresql", "sslmode") => kept.push(format!("sslmode={value}")),
                        ("mysql" | "mariadb", "usessl") => kept.push(if value == "true" {
                            "ssl-mode=required".to_owned()
                        } else {
                            "ssl-mode=disabled".to_owned()
                        }),
                        ("mysql" | "mariadb", "sslmode") => {
                            kept.push(format!("ssl-mode={}", value.to_ascii_lowercase()))
                        }
                        _ => ignored.push(param.to_owned()),
                    }
                }
                let scheme = if sub == "postgresql" {
                    "postgres"
                } else {
                    "mysql"
                };
                let hosts = match hosts.split_once('@') {
                    Some(_) => {
                        return Err(UrlError::Malformed {
                            url: shown,
                            why: "credentials in the JDBC URL: give them as \
                                  spring.datasource.username and password"
                                .to_owned(),
                        });
                    }
                    None => hosts,
                };
                if kept.is_empty() {
                    format!("{scheme}://{hosts}")
                } else {
                    format!("{scheme}://{hosts}?{}", kept.join("&"))
                }
            }
            "h2" | "oracle" | "sqlserver" | "db2" | "derby" | "hsqldb" | "gaussdb"
            | "opengauss" => {
                return Err(UrlError::Unsupported {
                    url: shown,
                    what: format!(
                        "{sub} (ElasticJob's RDB tracing writes there; shardjob does not)"
                    ),
                });
            }
            other => {
                return Err(UrlError::Unsupported {
                    url: shown,
                    what: format!("jdbc:{other}"),
                });
            }
        };
        let mut db = DatabaseUrl::parse(&url)?;
        db.username = username.filter(|u| !u.is_empty()).map(str::to_owned);
        db.password = password.filter(|p| !p.is_empty()).map(str::to_owned);
        db.ignored = ignored;
        Ok(db)
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The URL given to the driver (with the password, if the URL has one).
    pub fn driver_url(&self) -> &str {
        &self.url
    }

    /// The user name given beside the URL.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// The password given beside the URL.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// JDBC parameters of a translated URL that have no meaning for shardjob's driver (say
    /// `serverTimezone=UTC`): the caller says so in its log.
    pub fn ignored_parameters(&self) -> &[String] {
        &self.ignored
    }
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// The URL with the password of `scheme://user:password@host` replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_owned()
            };
            format!("{scheme}://{masked}{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_urls_name_their_dialect() {
        let cases = [
            (
                "sqlite://history.db",
                Dialect::Sqlite,
                "sqlite://history.db",
            ),
            ("sqlite::memory:", Dialect::Sqlite, "sqlite::memory:"),
            (
                "postgres://u:p@h:5432/d",
                Dialect::Postgres,
                "postgres://u:p@h:5432/d",
            ),
            ("postgresql://h/d", Dialect::Postgres, "postgresql://h/d"),
            ("mysql://u@h:3306/d", Dialect::MySql, "mysql://u@h:3306/d"),
            ("mariadb://u@h:3306/d", Dialect::MySql, "mysql://u@h:3306/d"),
        ];
        for (url, dialect, driver) in cases {
            let db = DatabaseUrl::parse(url).unwrap();
            assert_eq!(db.dialect(), dialect, "{url}");
            assert_eq!(db.driver_url(), driver, "{url}");
        }
    }

    #[test]
    fn own_urls_refuse_other_databases_and_jdbc() {
        assert!(matches!(
            DatabaseUrl::parse("oracle://h/d"),
            Err(UrlError::Unsupported { .. })
        ));
        let e = DatabaseUrl::parse("jdbc:mysql://h/d").unwrap_err();
        assert!(e.to_string().contains("spring.datasource.url"), "{e}");
        assert_eq!(DatabaseUrl::parse("  "), Err(UrlError::Empty));
        assert!(DatabaseUrl::parse("history.db").is_err());
    }

    #[test]
    fn jdbc_urls_of_the_three_databases_translate() {
        let db = DatabaseUrl::from_jdbc(
            "jdbc:mysql://db.local:3306/elasticjob?useSSL=false&serverTimezone=UTC",
            Some("root"),
            Some("s3cret"),
        )
        .unwrap();
        assert_eq!(db.dialect(), Dialect::MySql);
        assert_eq!(
            db.driver_url(),
            "mysql://db.local:3306/elasticjob?ssl-mode=disabled"
        );
        assert_eq!(db.username(), Some("root"));
        assert_eq!(db.password(), Some("s3cret"));
        assert_eq!(db.ignored_parameters(), ["serverTimezone=UTC".to_owned()]);

        let db = DatabaseUrl::from_jdbc("jdbc:mariadb://h/d", None, None).unwrap();
        assert_eq!(db.driver_url(), "mysql://h/d");

        let db = DatabaseUrl::from_jdbc(
            "jdbc:postgresql://pg:5432/jobs?sslmode=require&ApplicationName=x",
            Some("job"),
            None,
        )
        .unwrap();
        assert_eq!(db.dialect(), Dialect::Postgres);
        assert_eq!(db.driver_url(), "postgres://pg:5432/jobs?sslmode=require");
        assert_eq!(db.ignored_parameters(), ["ApplicationName=x".to_owned()]);

        let db = DatabaseUrl::from_jdbc("jdbc:sqlite:data/history.db", None, None).unwrap();
        assert_eq!(db.dialect(), Dialect::Sqlite);
        assert_eq!(db.driver_url(), "sqlite://data/history.db");
    }

    #[test]
    fn jdbc_urls_of_other_databases_are_refused_by_name() {
        for url in [
            "jdbc:h2:mem:job_event_storage",
            "jdbc:oracle:thin:@h:1521:orcl",
            "jdbc:sqlserver://h;databaseName=d",
        ] {
            let e = DatabaseUrl::from_jdbc(url, None, None).unwrap_err();
            assert!(matches!(e, UrlError::Unsupported { .. }), "{url}: {e}");
            assert!(e.to_string().contains("SQLite"), "{e}");
        }
        assert!(DatabaseUrl::from_jdbc("mysql://h/d", None, None).is_err());
        assert!(DatabaseUrl::from_jdbc("jdbc:mysql:h/d", None, None).is_err());
        assert!(DatabaseUrl::from_jdbc("jdbc:mysql://a,b/d", None, None).is_err());
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://job:s3cret@h:5432/d"),
            "postgres://job:***@h:5432/d"
        );
        assert_eq!(redact("mysql://job@h/d"), "mysql://job@h/d");
        assert_eq!(redact("sqlite://a@b.db"), "sqlite://a@b.db");
        let db = DatabaseUrl::parse("mysql://u:pw@h/d").unwrap();
        assert!(!format!("{db} {db:?}").contains("pw"));
    }
}
