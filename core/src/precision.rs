//! How a [`RowStore`](crate::row_store::RowStore) keeps its values: as `f32`s (two per word), or
//! as bf16s (four per word, half the bytes a row copy moves).
//!
//! Either way the store's interface is `f32`: a read widens each bf16 exactly (a bf16 is an
//! `f32` without the low 16 bits of its mantissa), and a write narrows each value to the
//! nearest bf16 (ties to even, `half`'s conversion). A caller that wants another rounding,
//! such as a stochastic one, rounds its values to bf16s first: the store then keeps them
//! exactly.
//!
//! ```
//! use ordo::precision::Precision;
//! use ordo::row_store::RowStore;
//! let s = RowStore::try_from_fn_in(Precision::Bf16, 1, 3, |_, c| [1.0, 0.1, -2.5][c]).unwrap();
//! let mut row = [0.0; 3];
//! s.read(0, &mut row).unwrap();
//! assert_eq!(row, [1.0, 0.10009765625, -2.5]); // 0.1 to its nearest bf16
//! assert_eq!(s.precision(), Precision::Bf16);
//! ```

/// The number format of a store's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Precision {
    /// IEEE single precision, two values per 64-bit word.
    #[default]
    F32,
    /// bfloat16 (an `f32`'s sign, exponent and top 7 mantissa bits), four values per word.
    Bf16,
}

impl Precision {
    /// Values one 64-bit word holds.
    pub const fn per_word(self) -> usize {
        match self {
            Precision::F32 => 2,
            Precision::Bf16 => 4,
        }
    }

    /// Bytes one value takes.
    pub const fn bytes(self) -> usize {
        8 / self.per_word()
    }

    /// The name used on command lines and in saved files: `f32` or `bf16`.
    pub const fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
