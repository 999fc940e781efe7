//! Reaching a key in a token: the module (loaded and initialised once per process), the slot
//! whose token the URI names, the login, the private key object and its public half.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use cryptoki::context::{CInitializeArgs, Pkcs11};
use cryptoki::error::{Error as CkError, RvError};
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use rustls::pki_types::{alg_id, SubjectPublicKeyInfoDer};

use super::der;
use super::sign::{self, KeyKind};
use crate::proto::pkcs11_uri::{Pin, Pkcs11Uri};

/// Why a token key could not be used. Each names the URI (without its PIN).
#[derive(Debug, thiserror::Error)]
pub enum Pkcs11Error {
    #[error("{uri}: no PKCS#11 module: give module-path in the URI or set pkcs11_module")]
    NoModule { uri: String },
    #[error("{uri}: cannot load the PKCS#11 module {}: {source}", module.display())]
    Module {
        uri: String,
        module: PathBuf,
        source: CkError,
    },
    #[error("{uri}: no token matches (tokens present: {present})")]
    NoToken { uri: String, present: String },
    #[error("{uri}: cannot read the PIN file {}: {source}", path.display())]
    PinFile {
        uri: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{uri}: the token refused the PIN ({source})")]
    Login { uri: String, source: CkError },
    #[error("{uri}: no private key matches")]
    NoKey { uri: String },
    #[error("{uri}: {n} private keys match: name one by object= and id=")]
    ManyKeys { uri: String, n: usize },
    #[error("{uri}: {what}")]
    Unsupported { uri: String, what: String },
    #[error("the process is exiting")]
    Exiting,
    #[error("{uri}: {doing}: {source}")]
    Token {
        uri: String,
        doing: &'static str,
        source: CkError,
    },
}

/// A key in a token, found and checked: what a signer session needs to reach it again.
pub struct TokenKey {
    ctx: Pkcs11,
    slot: Slot,
    uri: Pkcs11Uri,
    pin: Option<AuthPin>,
    pub kind: KeyKind,
    /// Its public half, as certificates carry it.
    pub public_key: SubjectPublicKeyInfoDer<'static>,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenKey({}, {:?})", self.uri.redacted(), self.kind)
    }
}

/// `DER OID` of the curves a token key may be on (CKA_EC_PARAMS).
const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

impl TokenKey {
    /// Finds the key `uri` names, with `module` unless the URI names its own; logs in once to
    /// read it.
    pub fn open(uri: &Pkcs11Uri, module: Option<&Path>) -> Result<TokenKey, Pkcs11Error> {
        let shown = uri.redacted();
        let module = uri
            .module_path
            .as_deref()
            .or(module)
            .ok_or_else(|| Pkcs11Error::NoModule { uri: shown.clone() })?;
        let ctx = loaded(module).map_err(|source| Pkcs11Error::Module {
            uri: shown.clone(),
            module: module.to_path_buf(),
            source,
        })?;
        let slot = find_slot(&ctx, uri)?;
        let pin = match &uri.pin {
            None => None,
            Some(Pin::Value(v)) => Some(AuthPin::new(v.clone())),
            Some(Pin::File(path)) => {
                let mut text =
                    std::fs::read_to_string(path).map_err(|source| Pkcs11Error::PinFile {
                        uri: shown.clone(),
                        path: path.clone(),
                        source,
                    })?;
                text.truncate(text.trim_end_matches(['\r', '\n']).len());
                // Moved, not copied: the secret's only copy is wiped when it goes.
                Some(AuthPin::new(text))
            }
        };
        // The key keeps its URI for messages, without the PIN.
        let mut named = uri.clone();
        named.pin = None;
        let mut key = TokenKey {
            ctx,
            slot,
            uri: named,
            pin,
            kind: KeyKind::EcP256,
            public_key: SubjectPublicKeyInfoDer::from(Vec::new()),
        };
        let (session, handle) = key.session()?;
        (key.kind, key.public_key) = key.public_half(&session, handle)?;
        // The public key object found beside the private one must be its other half: one
        // signature, checked, says so.
        sign::check_pair((key.kind, &key.public_key), &session, handle).map_err(|what| {
            Pkcs11Error::Unsupported {
                uri: key.name(),
                what,
            }
        })?;
        Ok(key)
    }

    /// The URI, without its PIN.
    pub fn name(&self) -> String {
        self.uri.redacted()
    }

    /// A new session on the token, logged in, and the key's handle in it.
    pub fn session(&self) -> Result<(Session, ObjectHandle), Pkcs11Error> {
        let session = self
            .ctx
            .open_ro_session(self.slot)
            .map_err(|e| self.token_err("opening a session", e))?;
        if let Some(pin) = &self.pin {
            match session.login(UserType::User, Some(pin)) {
                // Logged in is a state of the token for the whole process, not per session.
                Ok(()) | Err(CkError::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => {}
                // The PIN itself: trying it again would count towards locking it.
                Err(
                    source @ CkError::Pkcs11(
                        RvError::PinIncorrect
                        | RvError::PinLocked
                        | RvError::PinExpired
                        | RvError::PinInvalid
                        | RvError::PinLenRange,
                        _,
                    ),
                ) => {
                    return Err(Pkcs11Error::Login {
                        uri: self.name(),
                        source,
                    })
                }
                // The token's trouble (gone, restarting): worth trying again later.
                Err(e) => return Err(self.token_err("logging in", e)),
            }
        }
        let handle = self.find(&session, ObjectClass::PRIVATE_KEY)?;
        Ok((session, handle))
    }

    fn token_err(&self, doing: &'static str, source: CkError) -> Pkcs11Error {
        Pkcs11Error::Token {
            uri: self.name(),
            doing,
            source,
        }
    }

    /// The one object of `class` the URI's label and id name.
    fn find(&self, session: &Session, class: ObjectClass) -> Result<ObjectHandle, Pkcs11Error> {
        let mut template = vec![Attribute::Class(class)];
        if let Some(label) = &self.uri.object {
            template.push(Attribute::Label(label.as_bytes().to_vec()));
        }
        if let Some(id) = &self.uri.id {
            template.push(Attribute::Id(id.clone()));
        }
        let found = session
            .find_objects(&template)
            .map_err(|e| self.token_err("looking for the key", e))?;
        match found.as_slice() {
            [one] => Ok(*one),
            [] => Err(Pkcs11Error::NoKey { uri: self.name() }),
            many => Err(Pkcs11Error::ManyKeys {
                uri: self.name(),
                n: many.len(),
            }),
        }
    }

    /// The key's kind and public half: RSA's from the private key's own attributes, EC's point
    /// from its public key object (a private EC key carries only its curve).
    fn public_half(
        &self,
        session: &Session,
        key: ObjectHandle,
    ) -> Result<(KeyKind, SubjectPublicKeyInfoDer<'static>), Pkcs11Error> {
        let read = |h, what| {
            session
                .get_attributes(h, what)
                .map_err(|e| self.token_err("reading the key's attributes", e))
        };
        let unsupported = |what: String| Pkcs11Error::Unsupported {
            uri: self.name(),
            what,
        };
        let key_type = read(key, &[AttributeType::KeyType])?
            .into_iter()
            .find_map(|a| match a {
                Attribute::KeyType(k) => Some(k),
                _ => None,
            });
        match key_type {
            Some(k) if k == KeyType::RSA => {
                let (mut n, mut e) = (Vec::new(), Vec::new());
                for a in read(
                    key,
                    &[AttributeType::Modulus, AttributeType::PublicExponent],
                )? {
                    match a {
                        Attribute::Modulus(m) => n = m,
                        Attribute::PublicExponent(x) => e = x,
                        _ => {}
                    }
                }
                if n.is_empty() || e.is_empty() {
                    return Err(unsupported(
                        "an RSA key whose modulus or public exponent the token does not show"
                            .into(),
                    ));
                }
                let bits = n.iter().skip_while(|&&b| b == 0).count() * 8;
                if !(2048..=8192).contains(&bits) {
                    return Err(unsupported(format!(
                        "an RSA key of {bits} bits (2048 to 8192 are served)"
                    )));
                }
                let spki = rustls::sign::public_key_to_spki(
                    &alg_id::RSA_ENCRYPTION,
                    der::two_integers(&n, &e),
                );
                Ok((KeyKind::Rsa { bits }, spki))
            }
            Some(k) if k == KeyType::EC => {
                let params = read(key, &[AttributeType::EcParams])?
                    .into_iter()
                    .find_map(|a| match a {
                        Attribute::EcParams(p) => Some(p),
                        _ => None,
                    })
                    .unwrap_or_default();
                let (kind, alg, point_len) = match params.as_slice() {
                    P256 => (KeyKind::EcP256, &alg_id::ECDSA_P256, 65),
                    P384 => (KeyKind::EcP384, &alg_id::ECDSA_P384, 97),
                    _ => {
                        return Err(unsupported(
                            "an EC key on a curve other than P-256 or P-384".into(),
                        ))
                    }
                };
                let public = self.find(session, ObjectClass::PUBLIC_KEY).map_err(|_| {
                    unsupported(
                        "no public key object beside the private key (needed for its point)".into(),
                    )
                })?;
                let point = read(public, &[AttributeType::EcPoint])?
                    .into_iter()
                    .find_map(|a| match a {
                        Attribute::EcPoint(p) => Some(p),
                        _ => None,
                    })
                    .unwrap_or_default();
                let point = der::ec_point(&point, point_len).ok_or_else(|| {
                    unsupported(
                        "the token's public key is not an uncompressed point on its curve".into(),
                    )
                })?;
                let spki = rustls::sign::public_key_to_spki(alg, point);
                Ok((kind, spki))
            }
            _ => Err(unsupported("a key that is neither RSA nor EC".into())),
        }
    }
}

/// The module at `path`, loaded and initialised once for the process (PKCS#11 allows one
/// C_Initialize per process).
fn loaded(path: &Path) -> Result<Pkcs11, CkError> {
    static MODULES: OnceLock<Mutex<HashMap<PathBuf, Pkcs11>>> = OnceLock::new();
    // One library under two names (a link, a relative path) is one module.
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut modules = MODULES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(m) = modules.get(&path) {
        return Ok(m.clone());
    }
    let ctx = Pkcs11::new(&path)?;
    match ctx.initialize(CInitializeArgs::OsThreads) {
        Ok(()) | Err(CkError::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
        Err(e) => {
            // Dropping a context finalises the library, which would end the sessions of
            // whoever else in the process initialised it: never dropped.
            std::mem::forget(ctx);
            return Err(e);
        }
    }
    modules.insert(path, ctx.clone());
    Ok(ctx)
}

/// The slot whose token `uri` names (the first that matches every attribute it gives).
fn find_slot(ctx: &Pkcs11, uri: &Pkcs11Uri) -> Result<Slot, Pkcs11Error> {
    let shown = uri.redacted();
    let slots = ctx
        .get_slots_with_token()
        .map_err(|source| Pkcs11Error::Token {
            uri: shown.clone(),
            doing: "listing the slots",
            source,
        })?;
    let mut present = Vec::new();
    let mut found = Vec::new();
    for slot in slots {
        let Ok(info) = ctx.get_token_info(slot) else {
            continue;
        };
        let same = |want: &Option<String>, have: &str| {
            want.as_deref().is_none_or(|w| w == have.trim_end())
        };
        if same(&uri.token, info.label())
            && same(&uri.manufacturer, info.manufacturer_id())
            && same(&uri.serial, info.serial_number())
            && same(&uri.model, info.model())
            && uri.slot_id.is_none_or(|id| id == slot.id())
        {
            found.push(slot);
        }
        present.push(format!("{:?}", info.label().trim_end()));
    }
    match found.as_slice() {
        [one] => return Ok(*one),
        [] => {}
        _ => {
            return Err(Pkcs11Error::Unsupported {
                uri: shown,
                what: format!(
                    "{} tokens match ({}): name one with token=, serial= or slot-id=",
                    found.len(),
                    present.join(", ")
                ),
            })
        }
    }
    Err(Pkcs11Error::NoToken {
        uri: shown,
        present: if present.is_empty() {
            "none".into()
        } else {
            present.join(", ")
        },
    })
}
