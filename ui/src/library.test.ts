import { describe, expect, it } from 'vitest';
import { progressText } from './library';

describe('download progress', () => {
  it('shows bytes, speed and time left', () => {
    expect(progressText({ kind: 'progress', done: 12e6, total: 98.4e6, bytes_per_second: 25.3e6, eta_seconds: 3.4 })).toBe(
      '12.0 / 98.4 MB · 25.3 MB/s · 4 s left',
    );
    expect(progressText({ kind: 'progress', done: 0, total: 1e6, bytes_per_second: 0, eta_seconds: null })).toBe(
      '0.0 / 1.0 MB · 0.0 MB/s',
    );
  });
});
