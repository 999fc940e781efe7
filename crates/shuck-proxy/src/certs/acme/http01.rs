//! HTTP-01 (RFC 8555 §8.3): while an authorization is pending, `GET
//! /.well-known/acme-challenge/<token>` on port 80 answers the key authorization. The answers
//! of this process's orders are kept here by token; another host's come from the fleet's store
//! (sealed, like the TLS-ALPN-01 certificates), so whichever host the CA reaches answers.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

/// The path prefix a CA's HTTP-01 validator asks under.
pub(crate) const PATH_PREFIX: &str = "/.well-known/acme-challenge/";

/// The key authorizations of this process's pending HTTP-01 challenges, by token. Read without
/// a lock by the plain-HTTP listener.
#[derive(Debug, Default)]
pub(crate) struct HttpAnswers(ArcSwap<HashMap<String, Arc<str>>>);

impl HttpAnswers {
    /// Answers `token` with `key_authorization` for as long as the guard lives.
    pub(super) fn publish(self: &Arc<Self>, token: &str, key_authorization: &str) -> HttpPublished {
        let answer: Arc<str> = Arc::from(key_authorization);
        self.0.rcu(|t| {
            let mut t = HashMap::clone(t);
            t.insert(token.to_string(), answer.clone());
            t
        });
        HttpPublished {
            answers: Arc::clone(self),
            token: token.to_string(),
            answer,
        }
    }

    /// The key authorization for `token`, when this process has that challenge pending.
    pub(crate) fn answer(&self, token: &str) -> Option<Arc<str>> {
        self.0.load().get(token).cloned()
    }
}

/// Withdraws its answer when dropped (unless another order has replaced it since).
#[derive(Debug)]
pub(super) struct HttpPublished {
    answers: Arc<HttpAnswers>,
    token: String,
    answer: Arc<str>,
}

impl Drop for HttpPublished {
    fn drop(&mut self) {
        self.answers.0.rcu(|t| {
            let mut t = HashMap::clone(t);
            if t.get(&self.token)
                .is_some_and(|a| Arc::ptr_eq(a, &self.answer))
            {
                t.remove(&self.token);
            }
            t
        });
    }
}

/// Whether `s` can be a challenge token (RFC 8555 §8.3: base64url, at least 128 bits): only
/// such a path asks anything of the fleet's store.
pub(crate) fn is_token(s: &str) -> bool {
    (22..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The store key of the answer for `token`.
pub(crate) fn store_key(token: &str) -> String {
    format!("shuck:acme:http-01:{token}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_lives_as_long_as_its_guard() {
        let answers = Arc::new(HttpAnswers::default());
        let token = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA";
        let guard = answers.publish(token, "key.authorization");
        assert_eq!(answers.answer(token).as_deref(), Some("key.authorization"));
        drop(guard);
        assert_eq!(answers.answer(token), None);
    }

    #[test]
    fn tokens_are_long_base64url_words() {
        assert!(is_token("evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA"));
        assert!(!is_token("short"));
        assert!(!is_token("../../../../etc/passwd/and/more/to/be/long"));
        assert!(!is_token(&"a".repeat(129)));
    }
}
