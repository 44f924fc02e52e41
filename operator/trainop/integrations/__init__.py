"""trainop's trainer integrations: a Hugging Face `TrainerCallback`
(trainop.integrations.transformers) and a Lightning `Callback` (trainop.integrations.lightning)
that report progress through trainop's Reporter, checkpoint on the operator's request through
the trainer's own checkpointing, and resume from TRAINOP_RESUME_FROM the trainer's own way.

Standard library only at import (an import-linter contract): each library is imported when
its callback is first used, so `pip install trainop[transformers]` / `trainop[lightning]` are
extras, and the modules can ride in any training image beside trainop.launcher.
"""
