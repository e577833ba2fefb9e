//! The server's Ed25519 key: created on first start in the data directory
//! (`server.key`, mode 0600), loaded on every later start.

use crate::StoreError;
use cairn_core::note::{NoteSigner, NoteVerifier};
use std::io::Write as _;
use std::path::Path;

/// The server's signing key and its public half.
#[derive(Debug, Clone)]
pub struct ServerKey {
    /// Signs checkpoints and seals.
    pub signer: NoteSigner,
    /// The public key, published in vkey form.
    pub verifier: NoteVerifier,
}

/// File name of the key inside the data directory.
pub const KEY_FILE: &str = "server.key";

/// Loads `data_dir/server.key`, or creates it with a fresh key named
/// `name` if it does not exist. The file holds the C2SP private key string
/// (`PRIVATE+KEY+name+id+key`) and is created with mode 0600.
pub fn load_or_create_server_key(data_dir: &Path, name: &str) -> Result<ServerKey, StoreError> {
    let path = data_dir.join(KEY_FILE);
    let io = |context: String| move |source| StoreError::Io { context, source };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let signer = NoteSigner::parse(text.trim()).map_err(|e| {
                StoreError::Key(format!("{} does not hold a valid key: {e}", path.display()))
            })?;
            let verifier = signer.verifier();
            Ok(ServerKey { signer, verifier })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| {
                StoreError::Key(format!("no entropy source for the server key: {e}"))
            })?;
            let signer =
                NoteSigner::from_seed(name, &seed).map_err(|e| StoreError::Key(e.to_string()))?;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt as _;
                options.mode(0o600);
            }
            let mut file = options
                .open(&path)
                .map_err(io(format!("creating {}", path.display())))?;
            file.write_all(format!("{}\n", signer.to_private_string()).as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(io(format!("writing {}", path.display())))?;
            let verifier = signer.verifier();
            Ok(ServerKey { signer, verifier })
        }
        Err(e) => Err(StoreError::Io {
            context: format!("reading {}", path.display()),
            source: e,
        }),
    }
}
