//! Passwords: argon2id hashes in PHC form, with a random salt; verification in constant time
//! (the argon2 crate's), and the same work for a user that does not exist.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

/// The shortest password `--add-user` accepts.
pub const MIN_PASSWORD_CHARS: usize = 10;

/// Why a password cannot be hashed or a hash read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// The password is too short.
    #[error("the password must have at least {MIN_PASSWORD_CHARS} characters")]
    TooShort,
    /// The system's random source failed.
    #[error("no random salt: {0}")]
    Random(String),
    /// Hashing failed.
    #[error("cannot hash the password: {0}")]
    Hash(String),
    /// A stored hash is not an argon2 PHC string.
    #[error("password_hash is not an argon2 hash ($argon2id$…): {0}")]
    BadHash(String),
}

/// The hasher: argon2id with OWASP's minimum (19 MiB, 2 passes, 1 lane).
fn hasher() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).unwrap_or_default();
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes a new password (refused if shorter than [`MIN_PASSWORD_CHARS`]).
pub fn hash_password(password: &str) -> Result<String, PasswordError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(PasswordError::TooShort);
    }
    let mut salt = [0u8; 16];
    getrandom::getrandom(&mut salt).map_err(|e| PasswordError::Random(e.to_string()))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| PasswordError::Hash(e.to_string()))?;
    hasher()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError::Hash(e.to_string()))
}

/// Checks that a stored hash is an argon2 PHC string.
pub fn check_hash(hash: &str) -> Result<(), PasswordError> {
    let parsed = PasswordHash::new(hash).map_err(|e| PasswordError::BadHash(e.to_string()))?;
    if !parsed.algorithm.as_str().starts_with("argon2") {
        return Err(PasswordError::BadHash(format!(
            "algorithm {} is not argon2",
            parsed.algorithm
        )));
    }
    Ok(())
}

/// Whether `password` matches `hash`. A hash that does not parse matches nothing.
pub fn verify_password(password: &str, hash: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => hasher()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// Does the work of one verification against a hash nobody's password matches, so that a
/// login with an unknown user name takes as long as one with a wrong password.
pub fn verify_nobody(password: &str) {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let hash = DUMMY.get_or_init(|| {
        hash_password("nobody's password, never given").unwrap_or_else(|_| String::new())
    });
    let _ = verify_password(password, hash);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_differ() {
        let a = hash_password("correct horse battery").unwrap();
        let b = hash_password("correct horse battery").unwrap();
        assert_ne!(a, b, "a random salt each time");
        assert!(a.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{a}");
        assert!(verify_password("correct horse battery", &a));
        assert!(!verify_password("correct horse batterz", &a));
        assert!(!verify_password("x", "not a hash"));
        check_hash(&a).unwrap();
        assert!(check_hash("plain").is_err());
        assert_eq!(hash_password("short"), Err(PasswordError::TooShort));
        verify_nobody("whatever");
    }
}
