"""Train a GPT-2-style language model with blu: ``python -m examples.gpt2 --help``.

Modules: ``data`` (corpus discovery and download, tokenizers, train/val split, random batches),
``model`` (GPT-2 as pure functions over a nested dict of parameters), ``llama`` (a LLaMA-style
decoder in the same form: RMSNorm, RoPE, SwiGLU, grouped-query attention), ``models`` (both
behind one interface, chosen by the config), ``checkpoint`` (atomic safetensors + JSON
checkpoints), ``sample`` (a sampler that compiles once), ``decode`` (KV-cache decoding: a
generation loop compiled as one program), ``report`` (progress bar, loss curve),
``flags`` (the command line's flags and presets), ``train`` (the training loop).
"""


class ExampleError(Exception):
    """A problem the user can fix (bad flag, missing corpus, unusable checkpoint).

    The command line prints its message as ``error: ...`` and exits with status 2, without a
    traceback.
    """
