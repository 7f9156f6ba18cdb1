// The header's Dark/Light and Colours toggles. Both are the window's own choices, kept in its
// storage, not settings of the engine.

const THEME_KEY = 'specula.theme';
const COLOURS_KEY = 'specula.colours';

export interface AppearanceParts {
  /** Where the theme is said (`<html data-theme>`) and the colours are switched off (`<body>`). */
  html: HTMLElement;
  body: HTMLElement;
  theme: HTMLButtonElement;
  colours: HTMLInputElement;
}

export class Appearance {
  /** Applies the kept theme (else the system's) and colours at once: before the backend
   *  answers, so the window never shows the other theme first. */
  constructor(
    private readonly parts: AppearanceParts,
    private readonly storage: Storage,
    prefersDark: boolean,
  ) {
    this.applyTheme(storage.getItem(THEME_KEY) ?? (prefersDark ? 'dark' : 'light'));
    parts.colours.checked = storage.getItem(COLOURS_KEY) !== '0';
    parts.body.classList.toggle('no-colours', !parts.colours.checked);
  }

  /** Whether tokens are coloured by provenance (else replies read as markdown). */
  get colours(): boolean {
    return this.parts.colours.checked;
  }

  /** Wire the toggles; `onColours` redraws what the switch changes. */
  listen(onColours: (on: boolean) => void): void {
    const { colours, theme, html } = this.parts;
    colours.addEventListener('change', () => {
      this.applyColours(colours.checked);
      onColours(colours.checked);
    });
    theme.addEventListener('click', () => this.applyTheme(html.dataset.theme === 'dark' ? 'light' : 'dark'));
  }

  private applyTheme(theme: string): void {
    this.parts.html.dataset.theme = theme;
    this.parts.theme.textContent = theme === 'dark' ? 'Light' : 'Dark';
    this.storage.setItem(THEME_KEY, theme);
  }

  private applyColours(on: boolean): void {
    this.parts.colours.checked = on;
    this.parts.body.classList.toggle('no-colours', !on);
    this.storage.setItem(COLOURS_KEY, on ? '1' : '0');
  }
}
