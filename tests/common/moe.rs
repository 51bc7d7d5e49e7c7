//! The small MoE language model and batches the trainer tests share.

use gangway::Rng;
use gangway::moe::MoeLmConfig;

/// Two blocks of four experts, top-2: small enough for the software adapters.
pub fn config() -> MoeLmConfig {
    MoeLmConfig {
        context: 8,
        embed: 8,
        model: 32,
        hidden: 32,
        experts: 4,
        top_k: 2,
        capacity_factor: 1.25,
        blocks: 2,
        aux_alpha: 0.01,
        z_loss: 0.001,
        normalize_gates: true,
        seed: 3,
    }
}

const TEXT: &[u8] = b"the quick brown fox jumps over the lazy dog; a mixture of experts \
learns which expert should read which byte, and the router learns to balance them. ";

/// `tokens` windows of the text at random offsets: `(contexts, targets)`.
pub fn batch(cfg: &MoeLmConfig, tokens: usize, rng: &mut Rng) -> (Vec<u32>, Vec<u32>) {
    let (mut ctx, mut tgt) = (Vec::new(), Vec::new());
    for _ in 0..tokens {
        let at = rng.below(TEXT.len() - cfg.context - 1);
        ctx.extend(TEXT[at..at + cfg.context].iter().map(|&b| u32::from(b)));
        tgt.push(u32::from(TEXT[at + cfg.context]));
    }
    (ctx, tgt)
}
