"""What the plugin serves, by name, in a module that imports no Triton: the plugin's hooks read it
at load, and import the templates (and Triton with them) only for a Problem they may serve."""

NAME = "triton"
#: the ops the GEMM templates serve (conv has its own template: conv.py)
OPS = ("mm", "addmm", "bmm", "baddbmm", "mm_plus_mm")
#: the GEMM templates: pointer loads with any strides (and split-K), and TMA descriptor loads
TEMPLATES = ("gemm", "gemm_tma")
CONV_TEMPLATE = "conv"
ATTENTION_OP = "attention"
#: every op the plugin serves: the GEMM templates', the conv template's and flash attention's
SERVED = (*OPS, "conv", ATTENTION_OP)
