//! Key material for encrypted StorageOS volumes, in the layout the StorageOS node expects:
//! a per-namespace key wraps each volume's master key.
//!
//! - namespace key: 32 random bytes;
//! - volume master key (VMK): 64 random bytes, with a 32-byte random `iv`;
//! - `vuk` = a random 16-byte CBC IV ‖ AES-256-CBC(VMK) under HKDF-SHA256(secret = namespace
//!   key, salt = `iv`, info = empty); the VMK is a whole number of blocks, so no padding: 80 bytes;
//! - `hmac` = HMAC-SHA256(key = `iv`, message = VMK), so the node can tell a wrong key.

use aes::Aes256;
use aes::cipher::block_padding::NoPadding;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use rand::TryCryptoRng;
use sha2::Sha256;

/// Length of a namespace key.
pub const NAMESPACE_KEY_LEN: usize = 32;
/// Length of a volume master key.
pub const VMK_LEN: usize = 64;
/// Length of a volume key's `iv` (the HKDF salt and HMAC key).
pub const IV_LEN: usize = 32;
const CBC_IV_LEN: usize = 16;
/// Length of a wrapped volume key: CBC IV then the encrypted VMK.
pub const VUK_LEN: usize = CBC_IV_LEN + VMK_LEN;

/// Why key material could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The operating system's random source failed; retrying later may work.
    #[error("no randomness from the operating system: {0}")]
    Random(String),
    /// A key or ciphertext had the wrong size (a corrupt Secret, or a bug).
    #[error("invalid key material: {0}")]
    Invalid(&'static str),
}

/// The data of a volume key Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct VolumeKey {
    /// The volume master key.
    pub key: [u8; VMK_LEN],
    /// HKDF salt and HMAC key.
    pub iv: [u8; IV_LEN],
    /// The VMK wrapped with the namespace key.
    pub vuk: [u8; VUK_LEN],
    /// HMAC-SHA256 of the VMK keyed with `iv`.
    pub hmac: [u8; 32],
}

impl std::fmt::Debug for VolumeKey {
    /// Never prints key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VolumeKey { .. }")
    }
}

/// `N` random bytes.
pub fn random<const N: usize, R: TryCryptoRng>(rng: &mut R) -> Result<[u8; N], KeyError> {
    let mut out = [0; N];
    rng.try_fill_bytes(&mut out)
        .map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(out)
}

/// A new namespace key.
pub fn namespace_key<R: TryCryptoRng>(rng: &mut R) -> Result<[u8; NAMESPACE_KEY_LEN], KeyError> {
    random(rng)
}

/// The AES-256 key that wraps a VMK.
fn wrapping_key(namespace_key: &[u8], iv: &[u8; IV_LEN]) -> Result<[u8; 32], KeyError> {
    let mut out = [0; 32];
    Hkdf::<Sha256>::new(Some(iv), namespace_key)
        .expand(&[], &mut out)
        .map_err(|_| KeyError::Invalid("HKDF output length"))?;
    Ok(out)
}

fn mac(iv: &[u8; IV_LEN]) -> Result<Hmac<Sha256>, KeyError> {
    <Hmac<Sha256> as Mac>::new_from_slice(iv).map_err(|_| KeyError::Invalid("HMAC key length"))
}

/// A new volume key wrapped with `namespace_key`.
pub fn volume_key<R: TryCryptoRng>(namespace_key: &[u8], rng: &mut R) -> Result<VolumeKey, KeyError> {
    if namespace_key.is_empty() {
        return Err(KeyError::Invalid("empty namespace key"));
    }
    let key: [u8; VMK_LEN] = random(rng)?;
    let iv: [u8; IV_LEN] = random(rng)?;
    let cbc_iv: [u8; CBC_IV_LEN] = random(rng)?;
    let mut vuk = [0; VUK_LEN];
    let (head, body) = vuk.split_at_mut(CBC_IV_LEN);
    head.copy_from_slice(&cbc_iv);
    body.copy_from_slice(&key);
    cbc::Encryptor::<Aes256>::new(&wrapping_key(namespace_key, &iv)?.into(), &cbc_iv.into())
        .encrypt_padded_mut::<NoPadding>(body, VMK_LEN)
        .map_err(|_| KeyError::Invalid("VMK is not a whole number of AES blocks"))?;
    let mut h = mac(&iv)?;
    h.update(&key);
    let hmac = h.finalize().into_bytes().into();
    Ok(VolumeKey { key, iv, vuk, hmac })
}

/// The VMK inside `vuk`, unwrapped with `namespace_key`; verified against `hmac`.
pub fn open(namespace_key: &[u8], iv: &[u8], vuk: &[u8], hmac: &[u8]) -> Result<[u8; VMK_LEN], KeyError> {
    let iv: &[u8; IV_LEN] = iv.try_into().map_err(|_| KeyError::Invalid("iv length"))?;
    let vuk: &[u8; VUK_LEN] = vuk.try_into().map_err(|_| KeyError::Invalid("vuk length"))?;
    let (cbc_iv, body) = vuk.split_at(CBC_IV_LEN);
    let cbc_iv: &[u8; CBC_IV_LEN] = cbc_iv.try_into().map_err(|_| KeyError::Invalid("vuk length"))?;
    let mut key = [0; VMK_LEN];
    cbc::Decryptor::<Aes256>::new(&wrapping_key(namespace_key, iv)?.into(), cbc_iv.into())
        .decrypt_padded_b2b_mut::<NoPadding>(body, &mut key)
        .map_err(|_| KeyError::Invalid("vuk is not a whole number of AES blocks"))?;
    let mut h = mac(iv)?;
    h.update(&key);
    h.verify_slice(hmac)
        .map_err(|_| KeyError::Invalid("hmac does not match: wrong namespace key"))?;
    Ok(key)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn the_vuk_unwraps_to_the_vmk_and_the_hmac_verifies() {
        let mut rng = StdRng::seed_from_u64(7);
        let ns = namespace_key(&mut rng).unwrap();
        let v = volume_key(&ns, &mut rng).unwrap();
        assert_eq!((v.key.len(), v.iv.len(), v.vuk.len(), v.hmac.len()), (64, 32, 80, 32));
        assert_ne!(&v.vuk[16..], &v.key[..], "the VMK must not be stored in clear in vuk");
        assert_eq!(open(&ns, &v.iv, &v.vuk, &v.hmac).unwrap(), v.key);

        // Independent check of the wrapping with the primitives spelled out.
        let hk = Hkdf::<Sha256>::new(Some(&v.iv), &ns);
        let mut k = [0u8; 32];
        hk.expand(b"", &mut k).unwrap();
        let mut body = v.vuk[16..].to_vec();
        let iv16: [u8; 16] = v.vuk[..16].try_into().unwrap();
        cbc::Decryptor::<Aes256>::new(&k.into(), &iv16.into())
            .decrypt_padded_mut::<NoPadding>(&mut body)
            .unwrap();
        assert_eq!(body, v.key);
        let mut h = <Hmac<Sha256> as Mac>::new_from_slice(&v.iv).unwrap();
        h.update(&v.key);
        h.verify_slice(&v.hmac).unwrap();
    }

    #[test]
    fn keys_are_fresh_and_a_wrong_namespace_key_is_detected() {
        let mut rng = StdRng::seed_from_u64(8);
        let ns = namespace_key(&mut rng).unwrap();
        let (a, b) = (volume_key(&ns, &mut rng).unwrap(), volume_key(&ns, &mut rng).unwrap());
        assert_ne!(a.key, b.key);
        assert_ne!(a.iv, b.iv);
        assert_ne!(a.vuk[..16], b.vuk[..16], "each wrap has its own CBC IV");
        let other = namespace_key(&mut rng).unwrap();
        assert!(matches!(
            open(&other, &a.iv, &a.vuk, &a.hmac),
            Err(KeyError::Invalid(_))
        ));
        assert!(open(&ns, &a.iv, &a.vuk[..79], &a.hmac).is_err());
        assert!(volume_key(&[], &mut rng).is_err());
        assert_eq!(format!("{a:?}"), "VolumeKey { .. }");
    }
}
