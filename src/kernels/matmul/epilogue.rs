//! What a matmul does to each output as it stores it ([`Epilogue`]): independent stages, which
//! the shader runs in one fixed order.

/// An activation an epilogue applies, or takes the backward of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// elementwise's `max(v, 0)`; its backward reads the relu's output `r`: `select(0, v, r > 0)`.
    Relu,
    /// elementwise's GELU; its backward reads GELU's input `x`: `v · gelu'(x)`.
    Gelu,
}

/// What a matmul does to each output element as it stores it, in place of the kernels that would
/// follow it, with their arithmetic in the element type, so the bits are theirs. Each field is a
/// stage, and the stages run in this order whatever is asked (the shader's `EPILOGUE` bits):
///
/// 1. a relu (`activation: Some(Relu)`);
/// 2. adding an array shaped like C (`add`: `addend + v`, as elementwise's add and the
///    optimizers' accumulate compute it);
/// 3. an activation's backward (`backward_of`), reading that activation's saved array shaped
///    like C: a relu's output, or GELU's input;
/// 4. GELU (`activation: Some(Gelu)`).
///
/// With `keep`, the value before the last stage is stored as a second output: a relu layer's
/// output beside its residual sum, a gradient sum beside its relu-masked copy, GELU's input
/// beside GELU. The operands follow the factors (and the live-row counts) among a node's inputs:
/// the addend, then the saved array. Rows of C the kernel does not write (outside every row
/// group) stay as they are, so a grouped matmul takes these operands only where its groups cover
/// every row ([`super::Matmul`] checks it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Epilogue {
    pub activation: Option<Activation>,
    pub add: bool,
    pub backward_of: Option<Activation>,
    pub keep: bool,
}

impl Epilogue {
    /// Stores the product as it is.
    pub const NONE: Epilogue = Epilogue {
        activation: None,
        add: false,
        backward_of: None,
        keep: false,
    };

    /// `max(C, 0)`.
    pub const fn relu() -> Self {
        Self {
            activation: Some(Activation::Relu),
            ..Self::NONE
        }
    }

    /// `gelu(C)` (after an add, `gelu(addend + C)`).
    pub const fn gelu() -> Self {
        Self {
            activation: Some(Activation::Gelu),
            ..Self::NONE
        }
    }

    /// `addend + C`.
    pub const fn add() -> Self {
        Self::NONE.and_add()
    }

    /// The backward of `activation` of the product: `C · (r > 0)` or `C · gelu'(x)`.
    pub const fn backward_of(activation: Activation) -> Self {
        Self::NONE.and_backward_of(activation)
    }

    /// This, adding an array shaped like C as well (after a relu, before a backward or GELU).
    pub const fn and_add(self) -> Self {
        Self { add: true, ..self }
    }

    /// This, taking `activation`'s backward as well (after the add).
    pub const fn and_backward_of(self, activation: Activation) -> Self {
        Self {
            backward_of: Some(activation),
            ..self
        }
    }

    /// This, keeping the value before its last stage as a second output.
    pub const fn keeping(self) -> Self {
        Self { keep: true, ..self }
    }

    /// Why the shader cannot run it: keeping needs a stage to keep the value before.
    pub fn unsupported(self) -> Option<&'static str> {
        let stages = self.activation.is_some() || self.add || self.backward_of.is_some();
        (self.keep && !stages).then_some("an epilogue that keeps needs a stage to keep before")
    }

    /// Whether it reads an addend.
    pub fn adds(self) -> bool {
        self.add
    }

    /// Whether it keeps the value before its last stage as the node's second output.
    pub fn keeps(self) -> bool {
        self.keep
    }

    /// Whether it reads an activation's saved array (a relu's output, GELU's input).
    pub fn reads_saved(self) -> bool {
        self.backward_of.is_some()
    }

    /// The arrays it reads: the addend, the activation's saved array, each where it takes one.
    pub fn operands(self) -> usize {
        usize::from(self.adds()) + usize::from(self.reads_saved())
    }

    /// The shader's `EPILOGUE` bits: 1 relu, 2 add, 4 a relu's backward, 8 GELU's backward,
    /// 16 keep, 32 GELU.
    pub(super) fn bits(self) -> u32 {
        let is = |a: Option<Activation>, b: Activation| u32::from(a == Some(b));
        is(self.activation, Activation::Relu)
            | u32::from(self.add) << 1
            | is(self.backward_of, Activation::Relu) << 2
            | is(self.backward_of, Activation::Gelu) << 3
            | u32::from(self.keep) << 4
            | is(self.activation, Activation::Gelu) << 5
    }

    /// A name for errors and kernels, its stages in order: `+relu+add`, `+add+relu backward`,
    /// `+gelu, keeping its input`.
    pub fn suffix(self) -> String {
        let word = |a: Activation| match a {
            Activation::Relu => "relu",
            Activation::Gelu => "gelu",
        };
        // (name, what its output is called when it is kept before a later stage)
        let mut stages: Vec<(String, &str)> = Vec::new();
        if self.activation == Some(Activation::Relu) {
            stages.push(("+relu".into(), "the relu"));
        }
        if self.add {
            stages.push(("+add".into(), "the sum"));
        }
        if let Some(a) = self.backward_of {
            stages.push((format!("+{} backward", word(a)), "the backward"));
        }
        if self.activation == Some(Activation::Gelu) {
            stages.push(("+gelu".into(), "gelu"));
        }
        let mut name: String = stages.iter().map(|(s, _)| s.as_str()).collect();
        if self.keep {
            let kept = match stages.len() {
                0 => "nothing",
                1 if self.activation == Some(Activation::Gelu) => "its input",
                1 => "the product",
                n => stages[n - 2].1,
            };
            name += &format!(", keeping {kept}");
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bits_and_names_of_each_fusion_in_use() {
        let relu = Activation::Relu;
        for (e, bits, name) in [
            (Epilogue::NONE, 0, ""),
            (Epilogue::relu(), 1, "+relu"),
            (Epilogue::add(), 2, "+add"),
            (Epilogue::relu().and_add(), 3, "+relu+add"),
            (Epilogue::backward_of(relu), 4, "+relu backward"),
            (
                Epilogue::add().and_backward_of(relu),
                6,
                "+add+relu backward",
            ),
            (Epilogue::backward_of(Activation::Gelu), 8, "+gelu backward"),
            (
                Epilogue::relu().and_add().keeping(),
                19,
                "+relu+add, keeping the relu",
            ),
            (
                Epilogue::add().and_backward_of(relu).keeping(),
                22,
                "+add+relu backward, keeping the sum",
            ),
            (Epilogue::gelu().keeping(), 48, "+gelu, keeping its input"),
        ] {
            assert_eq!(e.bits(), bits, "{name}");
            assert_eq!(e.suffix(), name);
            assert!(e.unsupported().is_none(), "{name}");
        }
        assert!(Epilogue::NONE.keeping().unsupported().is_some());
    }
}
