"""What both sides of the experts benchmarks share (bench_experts.py, bench_moe.py): the
expert module, exactly apiary's FfnExpert (core/moe/expert_backend.hpp: Linear(h, 4h),
ReLU, Linear(4h, h), no GELU nor LayerNorm), and which expert each batch goes to, as
bench/experts_bench_apiary.cpp draws it. Imports neither apiary nor hivemind."""
import torch.nn as nn

MASK = (1 << 64) - 1


class ApiaryFfn(nn.Module):
    def __init__(self, hid_dim):
        super().__init__()
        self.ffn = nn.Sequential(nn.Linear(hid_dim, 4 * hid_dim), nn.ReLU(), nn.Linear(4 * hid_dim, hid_dim))

    def forward(self, x):
        return self.ffn(x)


def expert_of_batch(seed, client, batch, experts):
    """splitmix64 of one value mod `experts`: bench/experts_bench_apiary.cpp's expert_of_batch."""
    z = (seed * 1000003 + client * 1009 + batch + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) % experts
