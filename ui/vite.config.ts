import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Relative asset paths: the same build is served by Tauri and by `specula serve --ui`.
  base: './',
  build: { outDir: 'dist', target: 'es2022', chunkSizeWarningLimit: 1500 },
  test: { environment: 'jsdom', include: ['src/**/*.test.ts'] },
});
