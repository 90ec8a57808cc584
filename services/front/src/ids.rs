//! Stable identifiers: `sp_` + ULID for spaces, `nd_` + ULID for nodes,
//! `ls_` + ULID for path leases.
//!
//! Both are stored as 16 big-endian bytes so that keys sort by creation time.

use std::fmt;
use std::str::FromStr;

use ulid::Ulid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        pub struct $name(u128);

        impl $name {
            /// The textual prefix, underscore included.
            pub const PREFIX: &'static str = $prefix;

            /// A new identifier, unique and ordered by creation time.
            pub fn generate() -> Self {
                Self(Ulid::generate().0)
            }

            /// The 16-byte big-endian key form.
            pub fn to_bytes(self) -> [u8; 16] {
                self.0.to_be_bytes()
            }

            /// Reads the key form written by [`Self::to_bytes`].
            pub fn from_bytes(bytes: [u8; 16]) -> Self {
                Self(u128::from_be_bytes(bytes))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, Ulid(self.0))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = ();

            /// Parses `<prefix><26-character ULID>`; nothing else.
            fn from_str(s: &str) -> Result<Self, ()> {
                let ulid = s.strip_prefix($prefix).ok_or(())?;
                if ulid.len() != 26 {
                    return Err(());
                }
                Ulid::from_string(ulid).map(|u| Self(u.0)).map_err(|_| ())
            }
        }
    };
}

id_type!(
    /// Identifies a space for its whole life.
    SpaceId,
    "sp_"
);
id_type!(
    /// Identifies a file or directory; survives rename and move.
    NodeId,
    "nd_"
);
id_type!(
    /// Identifies a path lease.
    LeaseId,
    "ls_"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_text_and_bytes() {
        let id = SpaceId::generate();
        let text = id.to_string();
        assert!(text.starts_with("sp_") && text.len() == 29);
        assert_eq!(text.parse::<SpaceId>(), Ok(id));
        assert_eq!(SpaceId::from_bytes(id.to_bytes()), id);
        assert!(text.parse::<NodeId>().is_err());
        assert!("sp_short".parse::<SpaceId>().is_err());
    }
}
