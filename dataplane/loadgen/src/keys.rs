//! DH-HMAC-CHAP secrets for the load generator, read from files (as
//! nvme-cli's `--dhchap-secret` takes them, but off the command line).

use std::path::Path;

use nvmf::keys::DhchapSecret;
use nvmf_host::auth::DhchapKeys;

fn read(path: &Path) -> Result<DhchapSecret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("DH-HMAC-CHAP key file {}: {e}", path.display()))?;
    DhchapSecret::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The keys in `host` (and `ctrlr`), or none.
pub fn dhchap_keys(
    host: Option<&Path>,
    ctrlr: Option<&Path>,
) -> Result<Option<DhchapKeys>, String> {
    let Some(host) = host else {
        return Ok(None);
    };
    Ok(Some(DhchapKeys {
        host: read(host)?,
        ctrlr: ctrlr.map(read).transpose()?,
    }))
}
