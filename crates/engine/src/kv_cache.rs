//! A preallocated key/value cache for one attention layer.
//!
//! Writes go in place at the current length, so appending never copies what is cached, and
//! rolling back is only a smaller length: positions past it are dead and are overwritten by
//! the next append. This is what lets speculative decoding forget rejected tokens for free.

use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};

pub struct KvCache {
    /// `[n_kv_head, capacity, head_dim]`
    k: Tensor,
    /// `[n_kv_head, capacity, head_dim]`
    v: Tensor,
    len: usize,
}

impl KvCache {
    pub fn new(n_kv_head: usize, capacity: usize, head_dim: usize, device: &Device) -> Result<Self> {
        let shape = (n_kv_head, capacity, head_dim);
        Ok(Self { k: Tensor::zeros(shape, DType::F32, device)?, v: Tensor::zeros(shape, DType::F32, device)?, len: 0 })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.k.dims()[1]
    }

    /// Append `k`, `v`: `[n_kv_head, n, head_dim]`, contiguous.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let n = k.dims()[1];
        if self.len + n > self.capacity() {
            return Err(Error::ContextOverflow { prompt_tokens: self.len + n, context: self.capacity(), reserve: 0 });
        }
        self.k.slice_set(k, 1, self.len)?;
        self.v.slice_set(v, 1, self.len)?;
        self.len += n;
        Ok(())
    }

    /// Forget every position from `len` on. Growing is not possible: it would expose stale rows.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// A copy of the live positions, in host memory: another sequence may use the cache
    /// meanwhile, and [`Self::restore`] brings these back bit for bit.
    pub fn save(&self) -> Result<KvSnapshot> {
        let copy = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.narrow(1, 0, self.len)?.flatten_all()?.to_vec1()?) };
        Ok(KvSnapshot { k: copy(&self.k)?, v: copy(&self.v)?, len: self.len })
    }

    /// Hold exactly what `snapshot` held (positions past it are dead, as after a truncate).
    pub fn restore(&mut self, snapshot: &KvSnapshot) -> Result<()> {
        let (heads, capacity, dim) = self.k.dims3()?;
        if snapshot.len > capacity || snapshot.k.len() != heads * snapshot.len * dim {
            return Err(Error::InvalidSetting("a saved cache does not fit this model's".into()));
        }
        if snapshot.len > 0 {
            let device = self.k.device().clone();
            let shape = (heads, snapshot.len, dim);
            self.k.slice_set(&Tensor::from_slice(&snapshot.k, shape, &device)?, 1, 0)?;
            self.v.slice_set(&Tensor::from_slice(&snapshot.v, shape, &device)?, 1, 0)?;
        }
        self.len = snapshot.len;
        Ok(())
    }

    /// The whole buffers; only the first `len()` positions are live.
    pub fn buffers(&self) -> (&Tensor, &Tensor) {
        (&self.k, &self.v)
    }
}

/// One layer's live keys and values, copied out by [`KvCache::save`].
pub struct KvSnapshot {
    k: Vec<f32>,
    v: Vec<f32>,
    len: usize,
}

impl KvSnapshot {
    pub fn bytes(&self) -> usize {
        (self.k.len() + self.v.len()) * std::mem::size_of::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_truncate_and_overwrite() {
        let mut cache = KvCache::new(2, 4, 3, &Device::Cpu).unwrap();
        let ones = Tensor::ones((2, 3, 3), DType::F32, &Device::Cpu).unwrap();
        cache.append(&ones, &ones).unwrap();
        assert_eq!(cache.len(), 3);
        cache.truncate(1);
        assert_eq!(cache.len(), 1);
        cache.truncate(5);
        assert_eq!(cache.len(), 1, "truncate never grows");
        let twos = (ones.narrow(1, 0, 2).unwrap() * 2.0).unwrap().contiguous().unwrap();
        cache.append(&twos, &twos).unwrap();
        let k: Vec<Vec<Vec<f32>>> = cache.buffers().0.to_vec3().unwrap();
        assert_eq!(k[1][0], vec![1.0; 3]);
        assert_eq!(k[1][1], vec![2.0; 3]);
        assert_eq!(k[1][2], vec![2.0; 3]);
        let err = cache.append(&twos, &twos).unwrap_err();
        assert!(matches!(err, Error::ContextOverflow { .. }));
    }

    #[test]
    fn a_restored_cache_holds_what_was_saved_whatever_was_written_since() {
        let mut cache = KvCache::new(2, 6, 3, &Device::Cpu).unwrap();
        let rows = |x: f32, n| (Tensor::ones((2, n, 3), DType::F32, &Device::Cpu).unwrap() * x as f64).unwrap();
        cache.append(&rows(1.0, 3), &rows(-1.0, 3)).unwrap();
        let saved = cache.save().unwrap();
        assert_eq!(saved.bytes(), 2 * 2 * 3 * 3 * 4);
        cache.truncate(1);
        cache.append(&rows(7.0, 5), &rows(7.0, 5)).unwrap();
        cache.restore(&saved).unwrap();
        assert_eq!(cache.len(), 3);
        let (k, v) = cache.buffers();
        let live = |t: &Tensor| t.narrow(1, 0, 3).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(live(k), vec![1.0; 18]);
        assert_eq!(live(v), vec![-1.0; 18]);
        let other = KvCache::new(1, 6, 3, &Device::Cpu).unwrap().save().unwrap();
        assert!(KvCache::new(2, 2, 3, &Device::Cpu).unwrap().restore(&saved).is_err(), "too long");
        assert_eq!(other.bytes(), 0);
    }
}
