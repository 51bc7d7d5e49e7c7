//! What a matmul does to each output as it stores it ([`Epilogue`]).

/// What a matmul does to each output element as it stores it, in place of the kernels that would
/// follow it, with their arithmetic in the element type, so the bits are theirs, in this order: a
/// relu (elementwise's `max(v, 0)`); adding an array shaped like C (`addend + v`, as elementwise's
/// add and the optimizers' accumulate compute it); a relu's backward, the gradient through a relu
/// whose output `r` is an array shaped like C (elementwise's `select(0, v, r > 0)`), or GELU's
/// backward, the gradient through a GELU whose input `x` is an array shaped like C (elementwise's
/// `v · gelu'(x)`, with the same WGSL function). Its operands follow the factors (and the
/// live-row counts) among a node's inputs: the addend, then the activation's saved array (`r` or
/// `x`).
/// Rows of C the kernel does not write (outside every row group) stay as they are, so a grouped
/// matmul takes these operands only where its groups cover every row ([`super::Matmul`] checks it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Epilogue {
    #[default]
    None,
    /// `max(C, 0)`.
    Relu,
    /// `addend + C`.
    Add,
    /// `addend + max(C, 0)`: a relu layer's residual connection.
    ReluAdd,
    /// `C · (r > 0)`: a relu's backward of the product.
    ReluBackward,
    /// `(addend + C) · (r > 0)`: a relu's backward of a gradient summed with the product.
    AddReluBackward,
    /// `C · gelu'(x)`: GELU's backward of the product, `x` GELU's input.
    GeluBackward,
    /// [`Self::ReluAdd`], with `max(C, 0)` kept as a second output: a relu layer whose output
    /// the backward needs (for its mask) beside the residual sum.
    ReluAddKeepRelu,
    /// [`Self::AddReluBackward`], with `addend + C` kept as a second output: a gradient that
    /// flows on around the relu (the residual stream's) beside its masked copy.
    AddReluBackwardKeepSum,
    /// `gelu(C)`, with C kept as a second output: a GELU layer, whose backward reads GELU's
    /// input.
    GeluKeepInput,
}

impl Epilogue {
    pub fn relu(self) -> bool {
        matches!(self, Self::Relu | Self::ReluAdd | Self::ReluAddKeepRelu)
    }

    /// Whether it reads an addend.
    pub fn adds(self) -> bool {
        matches!(
            self,
            Self::Add
                | Self::ReluAdd
                | Self::AddReluBackward
                | Self::ReluAddKeepRelu
                | Self::AddReluBackwardKeepSum
        )
    }

    /// Whether it takes a relu's backward, reading the relu's output.
    pub fn relu_backward(self) -> bool {
        matches!(
            self,
            Self::ReluBackward | Self::AddReluBackward | Self::AddReluBackwardKeepSum
        )
    }

    /// Whether it keeps the value before its last stage (before the add, the relu's backward or
    /// GELU) as the node's second output.
    pub fn keeps(self) -> bool {
        matches!(
            self,
            Self::ReluAddKeepRelu | Self::AddReluBackwardKeepSum | Self::GeluKeepInput
        )
    }

    /// Whether it applies GELU.
    pub fn gelu(self) -> bool {
        self == Self::GeluKeepInput
    }

    /// Whether it takes GELU's backward, reading GELU's input.
    pub fn gelu_backward(self) -> bool {
        self == Self::GeluBackward
    }

    /// Whether it reads an activation's saved array (a relu's output, GELU's input).
    pub fn reads_saved(self) -> bool {
        self.relu_backward() || self.gelu_backward()
    }

    /// The arrays it reads: the addend, the activation's saved array, each where it takes one.
    pub fn operands(self) -> usize {
        usize::from(self.adds()) + usize::from(self.reads_saved())
    }

    /// The shader's `EPILOGUE` bits.
    pub(super) fn bits(self) -> u32 {
        u32::from(self.relu())
            | u32::from(self.adds()) << 1
            | u32::from(self.relu_backward()) << 2
            | u32::from(self.gelu_backward()) << 3
            | u32::from(self.keeps()) << 4
            | u32::from(self.gelu()) << 5
    }

    /// A name for errors: `+relu`, `+add`, `+relu+add`, `+relu backward`, `+add+relu backward`,
    /// `+gelu backward`, and the keeping ones' names.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::None => "",
            Self::Relu => "+relu",
            Self::Add => "+add",
            Self::ReluAdd => "+relu+add",
            Self::ReluBackward => "+relu backward",
            Self::AddReluBackward => "+add+relu backward",
            Self::GeluBackward => "+gelu backward",
            Self::ReluAddKeepRelu => "+relu+add, keeping the relu",
            Self::AddReluBackwardKeepSum => "+add+relu backward, keeping the sum",
            Self::GeluKeepInput => "+gelu, keeping its input",
        }
    }
}
