//! Named variants: one way to name, list and parse every enum a user or the lab chooses from
//! by name ([`RefStrategy`](crate::mm::refcount::RefStrategy),
//! [`InsertMode`](crate::mm::readahead::InsertMode), [`TableRef`](crate::mm::filetable::TableRef),
//! [`DrainFilter`](crate::mm::lru::DrainFilter), [`Tracking`](crate::mm::rmap::Tracking),
//! [`WbErrorPolicy`](crate::WbErrorPolicy)), and one error, [`UnknownVariant`], for a name
//! that is none of them.
//!
//! The names are stable: the lab writes them into its JSON and reads them from its command
//! line, so renaming one is a breaking change even where the enum's Rust name is not.
//!
//! ```
//! use foliocache::{Variant, WbErrorPolicy};
//! use foliocache::mm::refcount::RefStrategy;
//!
//! assert_eq!("locked-bit".parse::<RefStrategy>(), Ok(RefStrategy::LockedBit));
//! assert_eq!(WbErrorPolicy::KeepDirty.to_string(), "keep-dirty");
//! let err = "lockedbit".parse::<RefStrategy>().unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "unknown refcount strategy `lockedbit`: use one of cas-loop, optimistic, locked-bit"
//! );
//! assert_eq!(RefStrategy::ALL.len(), 3);
//! ```

use std::fmt;

/// An enum whose variants have stable names: listed, printed and parsed the same way.
///
/// Implemented by every variant enum of the crate; `Display` prints [`Variant::name`] and
/// `FromStr` parses it, with [`UnknownVariant`] as the error.
pub trait Variant: Copy + Sized + 'static {
    /// What the variants are variants of, in words (`"refcount strategy"`), for messages.
    const KIND: &'static str;
    /// Every variant, in the order the lab prints them (vanilla first).
    const ALL: &'static [Self];
    /// The variant's stable name (kebab-case).
    fn name(self) -> &'static str;

    /// The variant named `name`, or an [`UnknownVariant`] that lists the names there are.
    fn from_name(name: &str) -> Result<Self, UnknownVariant> {
        Self::ALL
            .iter()
            .copied()
            .find(|v| v.name() == name)
            .ok_or_else(|| UnknownVariant::new::<Self>(name))
    }
}

/// A name that is none of a [`Variant`] enum's names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownVariant {
    kind: &'static str,
    given: String,
    expected: Vec<&'static str>,
}

impl UnknownVariant {
    /// The error for `given`, which is not a name of `V`.
    pub fn new<V: Variant>(given: &str) -> UnknownVariant {
        UnknownVariant {
            kind: V::KIND,
            given: given.to_owned(),
            expected: V::ALL.iter().map(|v| v.name()).collect(),
        }
    }

    /// The same error, with extra accepted names (aliases a parser takes besides
    /// [`Variant::ALL`]'s).
    pub fn with_alias(mut self, alias: &'static str) -> UnknownVariant {
        self.expected.push(alias);
        self
    }

    /// What was being parsed (`"refcount strategy"`).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The name given.
    pub fn given(&self) -> &str {
        &self.given
    }

    /// The names accepted.
    pub fn expected(&self) -> &[&'static str] {
        &self.expected
    }
}

impl fmt::Display for UnknownVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} `{}`: use one of {}",
            self.kind,
            self.given,
            self.expected.join(", ")
        )
    }
}

impl std::error::Error for UnknownVariant {}

/// `Display` and `FromStr` for a [`Variant`] enum, from its `name` and `ALL`.
macro_rules! variant_traits {
    ($ty:ty) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::Variant::name(*self))
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::UnknownVariant;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$ty as $crate::Variant>::from_name(s)
            }
        }
    };
}
pub(crate) use variant_traits;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::filetable::TableRef;
    use crate::mm::lru::DrainFilter;
    use crate::mm::readahead::InsertMode;
    use crate::mm::refcount::RefStrategy;
    use crate::mm::rmap::Tracking;
    use crate::WbErrorPolicy;

    fn round_trips<V: Variant + PartialEq + fmt::Debug + fmt::Display + std::str::FromStr>()
    where
        <V as std::str::FromStr>::Err: fmt::Debug,
    {
        let mut names = std::collections::HashSet::new();
        for &v in V::ALL {
            assert_eq!(v.to_string(), v.name());
            assert_eq!(v.name().parse::<V>().unwrap(), v);
            assert!(names.insert(v.name()), "{} named twice", v.name());
            assert!(
                v.name()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{} is not kebab-case",
                v.name()
            );
        }
        let err = V::from_name("no-such-thing").unwrap_err();
        assert_eq!(err.kind(), V::KIND);
        assert_eq!(err.given(), "no-such-thing");
        for &v in V::ALL {
            assert!(
                err.to_string().contains(v.name()),
                "{err} lists {}",
                v.name()
            );
        }
    }

    #[test]
    fn every_variant_enum_prints_parses_and_lists_its_names() {
        round_trips::<RefStrategy>();
        round_trips::<InsertMode>();
        round_trips::<TableRef>();
        round_trips::<DrainFilter>();
        round_trips::<Tracking>();
        round_trips::<WbErrorPolicy>();
    }

    #[test]
    fn an_alias_is_listed_in_the_error() {
        let err = "rmap".parse::<Tracking>().unwrap_err();
        assert!(err.to_string().contains("rmap-id-auto"), "{err}");
    }
}
