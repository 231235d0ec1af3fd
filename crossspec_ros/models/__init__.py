"""models layer of crossspec: caption backends behind one small interface (``base``).

Modules (import them directly; this package imports nothing heavy):
- ``base``: CaptionModel / ModelSession / ModelInfo / PrefillTiming (the interface).
- ``hf_session``: the DynamicCache-backed session every backend returns.
- ``video_llava``: the Video-LLaVA verifier; ``hf_backend``: its LLaVA-family base.
- ``eventgpt`` (architecture), ``eventgpt_checkpoint`` (released layout), ``eventgpt_drafter``.
- ``llava_drafter``: any LlavaForConditionalGeneration on event images.
- ``tiny``: tiny random models and tokenizers; ``loading``/``errors``: loading and its errors;
  ``preprocess``: CLIP preprocessing without torchvision; ``streams``: CUDA streams, timing.
"""
