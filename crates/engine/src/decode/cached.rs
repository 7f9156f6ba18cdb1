//! A model with the ids its KV cache holds: what lets a chat reuse its earlier turns and a
//! speculative step roll back what the target rejected.

use super::disk_cache::DiskCache;
use super::{Flow, Progress, PromptCache, PREFILL_CHUNK};
use crate::error::{Error, Result};
use crate::models::{CausalLm, SavedState};
use crate::tokenizer::common_prefix;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// Fewer tokens than this are read again rather than restored: a few tokens' prefill costs
/// less than the copy of a shared prefix a parked sequence is left for (or, from disk, the read).
const MIN_RESUME_GAIN: usize = 64;

/// A model and the token ids its KV cache holds, so that a new prompt reuses the longest
/// cached prefix (the previous turns of a chat) and a rollback keeps both in step.
pub struct CachedModel {
    model: Box<dyn CausalLm>,
    ids: Vec<u32>,
    /// Sequences it held before, to resume from (off until given a budget); shared with the
    /// models made by [`Self::share`], so a chat resumes in whichever reply takes it up.
    prompts: Arc<Mutex<PromptCache>>,
    /// Sequences kept on disk across restarts (off until given a folder); shared likewise.
    disk: Arc<Mutex<Option<DiskCache>>>,
    /// Where and how much: the folder and its cap.
    disk_place: Option<(PathBuf, u64)>,
    /// The model file's key ([`super::disk_cache::model_key`]); none: nothing goes to disk.
    file_key: Option<String>,
    /// What the output layer scores (a draft's cut head changes the saved state's meaning).
    output_variant: String,
}

impl CachedModel {
    pub fn new(model: Box<dyn CausalLm>) -> Self {
        Self {
            model,
            ids: Vec::new(),
            prompts: Arc::new(Mutex::new(PromptCache::new(0))),
            disk: Arc::new(Mutex::new(None)),
            disk_place: None,
            file_key: None,
            output_variant: "all".into(),
        }
    }

    /// Name the model file this model was loaded from (its key), for the disk cache.
    pub fn set_file_key(&mut self, key: Option<String>) {
        self.file_key = key;
        self.open_disk();
    }

    /// Keep sequences on disk under `root`, in at most `bytes` (all models' together); `None`:
    /// none.
    pub fn set_disk_cache(&mut self, place: Option<(PathBuf, u64)>) {
        self.disk_place = place;
        self.open_disk();
    }

    /// The same weights with an empty sequence of their own and the same prompt caches, its
    /// passes taken with other replies' by `passes`: a model for a reply on another thread.
    pub fn share(&self, passes: Option<Arc<dyn crate::models::Passes>>) -> Result<Self> {
        let Some(model) = self.model.share(passes) else {
            return Err(Error::InvalidSetting("this model cannot serve several replies at once".into()));
        };
        Ok(Self {
            model,
            ids: Vec::new(),
            prompts: self.prompts.clone(),
            disk: self.disk.clone(),
            disk_place: self.disk_place.clone(),
            file_key: self.file_key.clone(),
            output_variant: self.output_variant.clone(),
        })
    }

    /// Take passes with other replies' by `passes` from now on (`None`: alone).
    pub fn set_passes(&mut self, passes: Option<Arc<dyn crate::models::Passes>>) {
        self.model.set_passes(passes);
    }

    /// Replies whose passes are taken with this model's now (1: alone).
    pub fn sharing(&self) -> usize {
        self.model.sharing()
    }

    pub fn disk_cache(&self) -> MutexGuard<'_, Option<DiskCache>> {
        lock(&self.disk)
    }

    fn open_disk(&mut self) {
        *lock(&self.disk) = match (&self.disk_place, &self.file_key) {
            (Some((root, bytes)), Some(key)) => {
                match DiskCache::open(root, &format!("{key}-{}", self.output_variant), *bytes) {
                    Ok(disk) => Some(disk),
                    // Prompts are then read again: slower, never wrong.
                    Err(e) => {
                        tracing::warn!("no prompt cache on disk: {e}");
                        None
                    }
                }
            }
            _ => None,
        };
    }

    /// Write the sequence held now to disk, unless it is there already or too short to be
    /// worth it; whether it was written. For the owner to call when nothing waits (a long
    /// chat is a few hundred MB).
    pub fn persist(&mut self) -> Result<bool> {
        let mut disk = lock(&self.disk);
        let Some(disk) = disk.as_mut() else { return Ok(false) };
        if self.ids.len() < super::prompt_cache::MIN_SAVED_TOKENS || disk.holds(&self.ids) {
            return Ok(false);
        }
        // The live rows a layer at a time, with no copy of the whole sequence first.
        if !disk.fits(self.model.live_bytes() as u64) {
            return Ok(false);
        }
        let model = &self.model;
        disk.store(&self.ids, &mut |out| match model.write_live(out)? {
            true => Ok(()),
            false => Err(Error::InvalidSetting("this model cannot write its state".into())),
        })?;
        Ok(true)
    }

    /// Keep up to `bytes` of earlier sequences' caches to resume from (0: none).
    pub fn set_prompt_cache(&mut self, bytes: usize) {
        lock(&self.prompts).set_budget(bytes);
    }

    pub fn prompt_cache(&self) -> MutexGuard<'_, PromptCache> {
        lock(&self.prompts)
    }

    pub fn model(&self) -> &dyn CausalLm {
        self.model.as_ref()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.model.capacity()
    }

    pub fn cached_ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn truncate(&mut self, len: usize) {
        self.ids.truncate(len);
        self.model.truncate(self.ids.len());
    }

    /// Score only `ids` from now on (`None`: every token); whether the model could.
    pub fn restrict_output(&mut self, ids: Option<&[u32]>) -> Result<bool> {
        // Saved sequences carry the output layer's state of their time: not this one's.
        lock(&self.prompts).clear();
        let done = self.model.restrict_output(ids)?;
        self.output_variant = match ids {
            Some(ids) => {
                format!("{:08x}", crc32fast::hash(&ids.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>()))
            }
            None => "all".into(),
        };
        self.open_disk();
        Ok(done)
    }

    /// Make the cache hold exactly `context`, feeding only what it lacks; the logits after its
    /// last token. The last token is fed again when the whole context was already cached.
    pub fn advance_to(&mut self, context: &[u32]) -> Result<Vec<f32>> {
        let keep = common_prefix(&self.ids, context).min(context.len().saturating_sub(1));
        self.truncate(keep);
        let logits = self.model.forward_last(&context[keep..])?;
        self.ids.extend_from_slice(&context[keep..]);
        Ok(logits.squeeze(0)?.to_vec1()?)
    }

    /// Make the cache hold `context` (no logits needed): prompt prefill. Returns how many
    /// tokens it fed (those not already cached).
    pub fn prefill(&mut self, context: &[u32]) -> Result<usize> {
        Ok(self.prefill_with(context, &mut |_, _| Flow::Continue)?.unwrap_or(0))
    }

    /// [`Self::prefill`] in chunks of [`PREFILL_CHUNK`], asking `progress` after each whether
    /// to go on. `None` when it was told to stop; the cache then holds the chunks fed so far
    /// (a later prompt with the same start reuses them).
    pub fn prefill_with(&mut self, context: &[u32], progress: Progress) -> Result<Option<usize>> {
        let keep = self.resume(context)?;
        self.truncate(keep);
        let total = context.len() - keep;
        for chunk in context[keep..].chunks(PREFILL_CHUNK) {
            self.model.forward_last(chunk)?;
            self.ids.extend_from_slice(chunk);
            if progress(self.ids.len() - keep, total) == Flow::Stop {
                return Ok(None);
            }
        }
        Ok(Some(total))
    }

    /// Before the cache turns to `context`: park what it would lose (another chat's sequence,
    /// moved into the prompt cache) and take up the saved sequence that shares the most of
    /// `context`, when that is more than the cache holds now; failing that, start from a copy
    /// of the prefix the parked sequence shares with `context`. The tokens of `context` then
    /// cached.
    fn resume(&mut self, context: &[u32]) -> Result<usize> {
        let here = common_prefix(&self.ids, context);
        // Taken out before the outgoing sequence is kept, so keeping it cannot evict this one;
        // the live cache holds it from then on.
        let resumed = lock(&self.prompts).take_best(context, here + MIN_RESUME_GAIN);
        let parked = match here < self.ids.len() && lock(&self.prompts).wants(&self.ids) {
            true => self.park(),
            false => None,
        };
        match resumed.or_else(|| self.resume_from_disk(context, here + MIN_RESUME_GAIN)) {
            Some((ids, state)) => self.take_up(ids, state),
            None => {
                if let Some((ids, state)) = parked.as_ref().filter(|_| here > 0) {
                    self.fork(&ids[..here], state);
                }
            }
        }
        if let Some((ids, state)) = parked {
            lock(&self.prompts).keep(ids, state);
        }
        Ok(common_prefix(&self.ids, context))
    }

    /// Move the live sequence out, with its ids; the model then runs an empty one.
    fn park(&mut self) -> Option<(Vec<u32>, SavedState)> {
        match self.model.park() {
            Ok(Some(state)) => Some((std::mem::take(&mut self.ids), state)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("a prompt's cache could not be kept: {e}");
                None
            }
        }
    }

    /// Run `state`, the sequence after `ids`, from now on.
    fn take_up(&mut self, ids: Vec<u32>, state: SavedState) {
        match self.model.restore(state) {
            Ok(()) => self.ids = ids,
            // Never trusted half-restored: the cache starts empty, and the prompt is read.
            Err(e) => {
                tracing::warn!("a saved prompt could not be restored: {e}");
                self.truncate(0);
            }
        }
    }

    /// Run from now on a copy of the first `prefix.len()` positions of `parked`, whose ids
    /// start with `prefix`.
    fn fork(&mut self, prefix: &[u32], parked: &SavedState) {
        match self.model.fork(parked, prefix.len()) {
            Ok(()) => self.ids = prefix.to_vec(),
            Err(e) => {
                tracing::warn!("a shared prefix could not be copied: {e}");
                self.truncate(0);
            }
        }
    }

    /// The saved sequence on disk sharing the most (at least `at_least`) of `context`, read
    /// and checked; a file that fails is ignored (and removed).
    fn resume_from_disk(&mut self, context: &[u32], at_least: usize) -> Option<(Vec<u32>, SavedState)> {
        let mut disk = lock(&self.disk);
        let disk = disk.as_mut()?;
        let (entry, _) = disk.best(context, at_least, self.model.capacity())?;
        let (model, positions) = (&self.model, entry.ids.len());
        let state = disk.load(&entry, &mut |input| {
            let state = model.read_state(input)?;
            match state.len == positions {
                true => Ok(state),
                false => Err(Error::InvalidSetting("its state and its token ids disagree".into())),
            }
        })?;
        tracing::info!("resumed {} tokens of a prompt from the disk cache", entry.ids.len());
        Some((entry.ids, state))
    }

    /// Feed `tokens` and return the logits of every one of them, `[n][vocab]`.
    pub fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let logits = self.model.forward(tokens)?;
        self.ids.extend_from_slice(tokens);
        Ok(logits.to_vec2()?)
    }
}

/// A lock on what replies share; a reply that panicked while holding it left it whole (each
/// use is one call on it).
fn lock<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Check the prompt fits with room to generate at least one token.
pub fn check_context(prompt_tokens: usize, capacity: usize) -> Result<()> {
    if prompt_tokens == 0 {
        return Err(Error::InvalidSetting("the prompt is empty".into()));
    }
    if prompt_tokens >= capacity {
        return Err(Error::ContextOverflow { prompt_tokens, context: capacity, reserve: 1 });
    }
    Ok(())
}
