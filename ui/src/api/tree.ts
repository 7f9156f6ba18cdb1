// A conversation's messages as a tree, for the browser transport's own storage (the desktop
// app's is in crates/store, src/tree.rs, which this follows): Regenerate adds a sibling reply,
// Edit a sibling question, and a message is shown when neither it nor any message above it is
// deleted. Walks are loops bounded by the number of messages, never recursion.

/** What the tree needs of a message. */
export interface Node {
  id: number;
  /** None (or absent): the first message of the conversation. */
  parent_id?: number | null;
  deleted?: boolean;
}

export class Tree<T extends Node> {
  private readonly byId = new Map<number, T>();
  private readonly children = new Map<number | null, T[]>();

  constructor(nodes: readonly T[]) {
    for (const n of [...nodes].sort((a, b) => a.id - b.id)) {
      this.byId.set(n.id, n);
      const parent = n.parent_id ?? null;
      const list = this.children.get(parent) ?? [];
      list.push(n);
      this.children.set(parent, list);
    }
  }

  get(id: number): T | undefined {
    return this.byId.get(id);
  }

  /** The messages from the first to `leaf`; a hidden leaf ends at the last shown above it. */
  pathTo(leaf: number | null): T[] {
    const up: T[] = [];
    for (let at = leaf === null ? undefined : this.byId.get(leaf); at && up.length <= this.byId.size; ) {
      up.push(at);
      at = at.parent_id == null ? undefined : this.byId.get(at.parent_id);
    }
    const path = up.reverse();
    const hidden = path.findIndex((n) => n.deleted);
    return hidden < 0 ? path : path.slice(0, hidden);
  }

  /** The shown messages that follow the same message as `id`, itself among them, oldest first. */
  siblings(id: number): number[] {
    const parent = this.byId.get(id)?.parent_id ?? null;
    return this.shownChildren(parent).map((n) => n.id);
  }

  private shownChildren(parent: number | null): T[] {
    return (this.children.get(parent) ?? []).filter((n) => !n.deleted);
  }

  /** The newest shown message at or under `top` (null: anywhere). */
  newestUnder(top: number | null): number | null {
    if (top !== null && this.byId.get(top)?.deleted) return null;
    let newest = top;
    const stack: (number | null)[] = [top];
    const seen = new Set<number>();
    while (stack.length) {
      const at = stack.pop() as number | null;
      for (const child of this.shownChildren(at)) {
        if (seen.has(child.id)) continue;
        seen.add(child.id);
        newest = Math.max(newest ?? child.id, child.id);
        stack.push(child.id);
      }
    }
    return newest;
  }

  /** Whether `id` is `top` or under it. */
  isUnder(id: number, top: number): boolean {
    let steps = 0;
    for (let at = this.byId.get(id); at && steps++ <= this.byId.size; ) {
      if (at.id === top) return true;
      at = at.parent_id == null ? undefined : this.byId.get(at.parent_id);
    }
    return false;
  }
}
