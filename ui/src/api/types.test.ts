import { expect, it } from 'vitest';
import { DEFAULT_SETTINGS as ENGINE_DEFAULTS } from './bindings';
import { DEFAULT_SETTINGS } from './types';

it("a window starts from the engine's own defaults (the drafter once drifted to 'model' here)", () => {
  expect(DEFAULT_SETTINGS).toEqual(ENGINE_DEFAULTS);
  expect(DEFAULT_SETTINGS.drafter).toBe('auto');
  expect(DEFAULT_SETTINGS.target).toBe('');
});
