//! C2SP signed notes (`signed-note`), their Ed25519 keys, and C2SP
//! cosignatures (`tlog-cosignature`, `cosignature/v1`).
//!
//! A signed note is a UTF-8 text ending in a newline, a blank line, then one
//! line per signature: `— <key name> <base64(key id || signature)>`. The key
//! id is the first four bytes of `SHA-256(name || "\n" || type || public
//! key)`, with type `0x01` for Ed25519 and `0x04` for cosignatures. Parsing
//! and verification follow the reference implementation
//! (`golang.org/x/mod/sumdb/note`): signatures by unknown keys are kept but
//! not trusted, a signature by a known key that does not verify rejects the
//! whole note, and a note with no verified signature is not verified.

use crate::hash::Hash;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use std::fmt;

/// Signature type byte of plain Ed25519 note signatures.
pub const ALG_ED25519: u8 = 0x01;
/// Signature type byte of C2SP `cosignature/v1` witness signatures.
pub const ALG_COSIGNATURE_V1: u8 = 0x04;

/// The em dash and space that start every signature line.
const SIG_PREFIX: &str = "\u{2014} ";
/// The most distinct signature lines one note may hold (FORMAT 7.1; a
/// line repeated exactly counts once).
const MAX_SIGNATURES: usize = 100;

/// Errors from keys, notes and signatures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NoteError {
    /// A key name is empty, contains white space or `+`.
    #[error("invalid key name {0:?}: must be non-empty, without spaces or '+'")]
    BadKeyName(String),
    /// A key string is not `name+hexid+base64key` (or the private form).
    #[error("malformed key: {0}")]
    MalformedKey(String),
    /// The key id in a key string does not match the key.
    #[error("key id does not match key for {0:?}")]
    KeyIdMismatch(String),
    /// The note's text or signature block is malformed.
    #[error("malformed note: {0}")]
    Malformed(&'static str),
    /// A signature from a known key did not verify.
    #[error("invalid signature by {name} ({key_id:08x})")]
    InvalidSignature {
        /// Key name of the failing signature.
        name: String,
        /// Key id of the failing signature.
        key_id: u32,
    },
    /// No signature in the note is by a known key.
    #[error("note has no signature by a known key")]
    NoKnownSignature,
    /// A key held elsewhere ([`RemoteKey`]) did not sign, or returned a
    /// signature that does not verify with its public key.
    #[error("the external signer failed: {0}")]
    Signer(String),
}

/// A private key held outside this process (an HSM, a KMS, a signing
/// agent): the implementation does the I/O, the core only asks it to sign.
/// Every signature it returns is checked against its public key before use.
pub trait RemoteKey: Send + Sync {
    /// The Ed25519 public key.
    fn public_key(&self) -> VerifyingKey;
    /// The Ed25519 signature (RFC 8032) of `message`.
    fn sign(&self, message: &[u8]) -> Result<[u8; 64], String>;
}

/// Where a signer's private key is. (A local key is kept inline: it is
/// the common case, and signers are few and long-lived.)
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum KeyMaterial {
    /// In memory, from a key file or a seed.
    Local(SigningKey),
    /// Held elsewhere.
    Remote(std::sync::Arc<dyn RemoteKey>),
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('+') && !name.chars().any(char::is_whitespace)
}

/// The 4-byte key id: `SHA-256(name || "\n" || alg || key)[:4]`, big-endian.
pub fn key_id(name: &str, alg: u8, public_key: &[u8; 32]) -> u32 {
    let mut input = Vec::with_capacity(name.len() + 34);
    input.extend_from_slice(name.as_bytes());
    input.push(b'\n');
    input.push(alg);
    input.extend_from_slice(public_key);
    let h = Hash::sha256(&input);
    u32::from_be_bytes([h.0[0], h.0[1], h.0[2], h.0[3]])
}

/// A public key that checks note signatures: a name, its key id, its
/// algorithm (Ed25519 or cosignature/v1) and the Ed25519 point.
#[derive(Clone, PartialEq, Eq)]
pub struct NoteVerifier {
    name: String,
    key_id: u32,
    alg: u8,
    key: VerifyingKey,
}

impl NoteVerifier {
    /// A verifier for `name` with an Ed25519 public key and algorithm byte.
    pub fn new(name: &str, alg: u8, key: VerifyingKey) -> Result<NoteVerifier, NoteError> {
        if !valid_name(name) {
            return Err(NoteError::BadKeyName(name.to_owned()));
        }
        if alg != ALG_ED25519 && alg != ALG_COSIGNATURE_V1 {
            return Err(NoteError::MalformedKey(format!(
                "unknown algorithm {alg:#04x}"
            )));
        }
        Ok(NoteVerifier {
            name: name.to_owned(),
            key_id: key_id(name, alg, key.as_bytes()),
            alg,
            key,
        })
    }

    /// Parses the vkey form `name+hexid+base64(alg || key)`.
    pub fn parse(vkey: &str) -> Result<NoteVerifier, NoteError> {
        let mut parts = vkey.splitn(3, '+');
        let (Some(name), Some(id_hex), Some(key_b64)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(NoteError::MalformedKey("expected name+id+key".into()));
        };
        let id = parse_key_id(id_hex)?;
        let bytes = B64
            .decode(key_b64)
            .map_err(|_| NoteError::MalformedKey("key is not base64".into()))?;
        let [alg, rest @ ..] = bytes.as_slice() else {
            return Err(NoteError::MalformedKey("empty key".into()));
        };
        let point: [u8; 32] = rest
            .try_into()
            .map_err(|_| NoteError::MalformedKey("Ed25519 keys are 32 bytes".into()))?;
        let key = VerifyingKey::from_bytes(&point)
            .map_err(|_| NoteError::MalformedKey("not an Ed25519 point".into()))?;
        let verifier = NoteVerifier::new(name, *alg, key)?;
        if verifier.key_id != id {
            return Err(NoteError::KeyIdMismatch(name.to_owned()));
        }
        Ok(verifier)
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The 4-byte key id.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The algorithm byte ([`ALG_ED25519`] or [`ALG_COSIGNATURE_V1`]).
    pub fn alg(&self) -> u8 {
        self.alg
    }

    /// The Ed25519 public key.
    pub fn public_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// Checks a plain Ed25519 signature over the note text.
    fn verify_text(&self, text: &str, sig: &[u8]) -> bool {
        let Ok(sig) = ed25519_dalek::Signature::from_slice(sig) else {
            return false;
        };
        self.key.verify_strict(text.as_bytes(), &sig).is_ok()
    }
}

impl fmt::Display for NoteVerifier {
    /// The vkey form, `name+hexid+base64(alg || key)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = vec![self.alg];
        bytes.extend_from_slice(self.key.as_bytes());
        write!(f, "{}+{:08x}+{}", self.name, self.key_id, B64.encode(bytes))
    }
}

impl fmt::Debug for NoteVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NoteVerifier({self})")
    }
}

fn parse_key_id(hex_id: &str) -> Result<u32, NoteError> {
    if hex_id.len() != 8 || !hex_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(NoteError::MalformedKey(
            "key id must be 8 hex digits".into(),
        ));
    }
    u32::from_str_radix(hex_id, 16).map_err(|_| NoteError::MalformedKey("bad key id".into()))
}

/// A private Ed25519 key with a name, producing note signature lines. The
/// key is in memory or held by a [`RemoteKey`].
#[derive(Clone)]
pub struct NoteSigner {
    name: String,
    key_id: u32,
    key: KeyMaterial,
}

impl NoteSigner {
    /// A signer from a 32-byte Ed25519 seed. The caller supplies the
    /// randomness: the core never reads an entropy source.
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<NoteSigner, NoteError> {
        if !valid_name(name) {
            return Err(NoteError::BadKeyName(name.to_owned()));
        }
        let key = SigningKey::from_bytes(seed);
        Ok(NoteSigner {
            name: name.to_owned(),
            key_id: key_id(name, ALG_ED25519, key.verifying_key().as_bytes()),
            key: KeyMaterial::Local(key),
        })
    }

    /// A signer whose key is held by `remote`.
    pub fn remote(
        name: &str,
        remote: std::sync::Arc<dyn RemoteKey>,
    ) -> Result<NoteSigner, NoteError> {
        if !valid_name(name) {
            return Err(NoteError::BadKeyName(name.to_owned()));
        }
        Ok(NoteSigner {
            name: name.to_owned(),
            key_id: key_id(name, ALG_ED25519, remote.public_key().as_bytes()),
            key: KeyMaterial::Remote(remote),
        })
    }

    fn public_key(&self) -> VerifyingKey {
        match &self.key {
            KeyMaterial::Local(key) => key.verifying_key(),
            KeyMaterial::Remote(remote) => remote.public_key(),
        }
    }

    /// Parses the private key form `PRIVATE+KEY+name+hexid+base64(0x01 || seed)`.
    pub fn parse(skey: &str) -> Result<NoteSigner, NoteError> {
        let rest = skey
            .strip_prefix("PRIVATE+KEY+")
            .ok_or_else(|| NoteError::MalformedKey("missing PRIVATE+KEY+ prefix".into()))?;
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id_hex), Some(key_b64)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(NoteError::MalformedKey("expected name+id+key".into()));
        };
        let id = parse_key_id(id_hex)?;
        let bytes = B64
            .decode(key_b64)
            .map_err(|_| NoteError::MalformedKey("key is not base64".into()))?;
        let [ALG_ED25519, seed @ ..] = bytes.as_slice() else {
            return Err(NoteError::MalformedKey("not an Ed25519 private key".into()));
        };
        let seed: [u8; 32] = seed
            .try_into()
            .map_err(|_| NoteError::MalformedKey("Ed25519 seeds are 32 bytes".into()))?;
        let signer = NoteSigner::from_seed(name, &seed)?;
        if signer.key_id != id {
            return Err(NoteError::KeyIdMismatch(name.to_owned()));
        }
        Ok(signer)
    }

    /// The private key form, for storing in a key file (`None` for a key
    /// held elsewhere).
    pub fn to_private_string(&self) -> Option<String> {
        let KeyMaterial::Local(key) = &self.key else {
            return None;
        };
        let mut bytes = vec![ALG_ED25519];
        bytes.extend_from_slice(key.as_bytes());
        Some(format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.name,
            self.key_id,
            B64.encode(bytes)
        ))
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The 32-byte Ed25519 seed (to use the same key material for
    /// `cosignature/v1`, which has its own key id).
    pub(crate) fn seed(&self) -> Option<[u8; 32]> {
        match &self.key {
            KeyMaterial::Local(key) => Some(key.to_bytes()),
            KeyMaterial::Remote(_) => None,
        }
    }

    /// The matching verifier.
    pub fn verifier(&self) -> NoteVerifier {
        NoteVerifier {
            name: self.name.clone(),
            key_id: self.key_id,
            alg: ALG_ED25519,
            key: self.public_key(),
        }
    }

    /// Raw Ed25519 signature over arbitrary bytes (used for messages with
    /// their own layouts: COSE receipts). A remote key's signature is
    /// verified before it is returned.
    pub fn sign_raw(&self, message: &[u8]) -> Result<[u8; 64], NoteError> {
        match &self.key {
            KeyMaterial::Local(key) => Ok(key.sign(message).to_bytes()),
            KeyMaterial::Remote(remote) => {
                let bytes = remote.sign(message).map_err(NoteError::Signer)?;
                let signature = ed25519_dalek::Signature::from_bytes(&bytes);
                remote
                    .public_key()
                    .verify_strict(message, &signature)
                    .map_err(|_| {
                        NoteError::Signer(
                            "it returned a signature its public key does not verify".into(),
                        )
                    })?;
                Ok(bytes)
            }
        }
    }

    /// Signs a note text and returns the complete signed note.
    pub fn sign(&self, text: &str) -> Result<String, NoteError> {
        check_text(text)?;
        let mut out = String::with_capacity(text.len() + 120);
        out.push_str(text);
        out.push('\n');
        out.push_str(&self.signature_line(text)?);
        Ok(out)
    }

    /// One signature line (with its newline) over `text`, to append to an
    /// existing signed note.
    pub fn signature_line(&self, text: &str) -> Result<String, NoteError> {
        let mut blob = self.key_id.to_be_bytes().to_vec();
        blob.extend_from_slice(&self.sign_raw(text.as_bytes())?);
        Ok(format!("{SIG_PREFIX}{} {}\n", self.name, B64.encode(blob)))
    }
}

impl fmt::Debug for NoteSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NoteSigner({}+{:08x})", self.name, self.key_id)
    }
}

/// Rules for note text: non-empty, valid UTF-8 without control characters
/// other than newline, ending in a newline, no blank line inside.
fn check_text(text: &str) -> Result<(), NoteError> {
    if text.is_empty() || !text.ends_with('\n') {
        return Err(NoteError::Malformed("text must end with a newline"));
    }
    if text.contains("\n\n") || text.starts_with('\n') {
        return Err(NoteError::Malformed("text must not contain a blank line"));
    }
    if text.chars().any(|c| c < ' ' && c != '\n') {
        return Err(NoteError::Malformed("text contains a control character"));
    }
    Ok(())
}

/// One signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// Key name.
    pub name: String,
    /// Key id (first 4 bytes of the decoded signature).
    pub key_id: u32,
    /// The signature bytes after the key id.
    pub signature: Vec<u8>,
}

/// A parsed signed note whose signatures have not been checked yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The signed text, ending in a newline.
    pub text: String,
    /// Signature lines in order, duplicates removed.
    pub signatures: Vec<NoteSignature>,
}

impl Note {
    /// Parses a signed note without verifying it.
    pub fn parse(note: &str) -> Result<Note, NoteError> {
        if note.chars().any(|c| c < ' ' && c != '\n') {
            return Err(NoteError::Malformed("note contains a control character"));
        }
        let split = note
            .rfind("\n\n")
            .ok_or(NoteError::Malformed("no signature block"))?;
        let (text, sigs) = (&note[..=split], &note[split + 2..]);
        if sigs.is_empty() || !sigs.ends_with('\n') {
            return Err(NoteError::Malformed(
                "signature block must end with a newline",
            ));
        }
        let mut signatures: Vec<NoteSignature> = Vec::new();
        for line in sigs[..sigs.len() - 1].split('\n') {
            let body = line.strip_prefix(SIG_PREFIX).ok_or(NoteError::Malformed(
                "signature line must start with an em dash",
            ))?;
            let (name, b64) = body.split_once(' ').ok_or(NoteError::Malformed(
                "signature line needs a name and a signature",
            ))?;
            let blob = B64
                .decode(b64)
                .map_err(|_| NoteError::Malformed("signature is not base64"))?;
            if !valid_name(name) || blob.len() < 5 {
                return Err(NoteError::Malformed("bad signature line"));
            }
            let sig = NoteSignature {
                name: name.to_owned(),
                key_id: u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]),
                signature: blob[4..].to_vec(),
            };
            // FORMAT 7.1: the bound is on distinct lines (a line repeated
            // exactly counts once, wherever the repeat comes).
            if signatures.contains(&sig) {
                continue;
            }
            if signatures.len() == MAX_SIGNATURES {
                return Err(NoteError::Malformed("too many signatures"));
            }
            signatures.push(sig);
        }
        Ok(Note {
            text: text.to_owned(),
            signatures,
        })
    }

    /// Checks every signature by a known Ed25519 key. Fails if a known
    /// key's signature is invalid or if none is by a known key; returns the
    /// verifiers whose signatures verified. Cosignature keys are checked by
    /// [`crate::checkpoint::verify_cosignature`], not here.
    pub fn verify<'k>(
        &self,
        known: &'k [NoteVerifier],
    ) -> Result<Vec<&'k NoteVerifier>, NoteError> {
        let mut verified: Vec<&NoteVerifier> = Vec::new();
        for sig in &self.signatures {
            let Some(key) = known
                .iter()
                .find(|k| k.alg == ALG_ED25519 && k.name == sig.name && k.key_id == sig.key_id)
            else {
                continue;
            };
            if !key.verify_text(&self.text, &sig.signature) {
                return Err(NoteError::InvalidSignature {
                    name: sig.name.clone(),
                    key_id: sig.key_id,
                });
            }
            if !verified.iter().any(|v| std::ptr::eq(*v, key)) {
                verified.push(key);
            }
        }
        if verified.is_empty() {
            return Err(NoteError::NoKnownSignature);
        }
        Ok(verified)
    }
}

/// Verifies a signed note against known keys and returns its text.
pub fn open(note: &str, known: &[NoteVerifier]) -> Result<String, NoteError> {
    let parsed = Note::parse(note)?;
    parsed.verify(known)?;
    Ok(parsed.text)
}
