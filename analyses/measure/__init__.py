"""The measuring floor: what every study measures with, under every study (issue 47).

* what a model is measured on: :mod:`~headlens.analyses.measure.spec` (the settings),
  :mod:`~headlens.analyses.measure.setup` (settings -> evaluation set),
  :mod:`~headlens.analyses.measure.texts` (which text, the one rule) and the texts' sources
  (:mod:`~headlens.analyses.measure.python_docs`);
* how: :mod:`~headlens.analyses.measure.masks` (which heads are removed while measuring),
  :mod:`~headlens.analyses.measure.metrics` (per-item values), :mod:`~headlens.analyses.measure.attention_stats`
  (reductions of attention patterns);
* what a number may say: :mod:`~headlens.analyses.measure.stats` (the bootstrap, Spearman) and
  :mod:`~headlens.analyses.measure.verdicts` (when an estimate states a finding);
* :mod:`~headlens.analyses.measure.records`: the journal a resumable study writes its measurements to.

Nothing here imports a study (ablation, patching, heads, sinks, design, circuits) or a builder
(demo, synthetic, tracr): tests/meta/test_layout.py holds analyses/ to its floors.  This module
imports nothing, so a light caller (``headlens demo heldout``) reads one submodule without the rest.

**What a study is measured on.** An evaluation set and a per-item metric.

Three kinds of evaluation set:

* **text** (metric ``loss``): ``n_windows`` non-overlapping windows of ``window`` tokens cut
  from a text (by default the evaluation text that ships with headlens, see
  ``analyses/data/SOURCES.md``).  An item is a window; its value is the mean next-token
  cross-entropy (nats) over the window's ``window - 1`` predictions.  All windows have the
  same length, so the mean over items is also the mean over tokens.
* **task** (metric ``logit-diff``): JSONL prompts, one object a line,
  ``{"prompt": "When Mary and John went to the store, John gave a drink to",
  "correct": " Mary", "incorrect": " John"}``.  ``correct`` and ``incorrect`` must each be
  exactly one token (write the leading space the model sees).  An item's value is
  ``logit[correct] - logit[incorrect]`` at the prompt's last token.
* **sentences** (metric ``embedding``, :func:`embedding_eval_set`): one sentence per item,
  framed with the model's special tokens (``[CLS] ... [SEP]`` for BERT, see
  :meth:`headlens.probes.loading.LoadedModel.frame`).  An item's value is the **embedding change**
  ``1 - cos(e, e0)``: ``e`` is the sentence embedding of the run being measured, ``e0`` that of
  the unablated model (computed once, one sentence at a time, when the set is built).  The
  sentence embedding is the mean of the last hidden state over every real token, the framing
  tokens included, as sentence-transformers pools all-MiniLM-L6-v2 (its
  ``1_Pooling/config.json``: ``pooling_mode_mean_tokens``; the final normalisation does not
  change a cosine).  The last hidden state is the output of the last block for an encoder
  (BERT's final LayerNorm is inside its last block; equal to ``transformers.AutoModel``'s
  ``last_hidden_state``), the final norm's output for a decoder.  No output head is read, so
  the metric means something when the head is new (``LoadedModel.head_is_new``).  Its
  gradient is zero in the unablated model (``1 - cos`` is at its minimum, 0), so no gradient
  estimate (attribution, Michel importance) can be made from it.

Prompts are right-padded; padded positions never count in any value.  Encoders get the
attention mask in every forward (a bidirectional model would otherwise attend to the padding),
so a batch gives each item what it gets alone.

Loss and logit difference read the output head: :func:`check_metric` refuses them when the head
was newly initialised (random), and next-token loss on a bidirectional encoder.

The pieces live in :mod:`~headlens.analyses.measure.evalset` (the sets and their metric),
:mod:`~headlens.analyses.measure.embedding` (sentence sets and embeddings) and
:mod:`~headlens.analyses.measure.metrics` (per-item values).
"""
