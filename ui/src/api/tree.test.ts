import { describe, expect, it } from 'vitest';
import { Tree, type Node } from './tree';

/** 1 -> 2 -> 3, 2 -> 4 (a regenerated reply), 1 -> 5 -> 6 (an edited question). */
const example = (deleted: number[] = []): Tree<Node> =>
  new Tree(
    [
      [1, null],
      [2, 1],
      [3, 2],
      [4, 2],
      [5, 1],
      [6, 5],
    ].map(([id, parent_id]) => ({ id: id as number, parent_id, deleted: deleted.includes(id as number) })),
  );

describe('a conversation tree', () => {
  it('runs a path from the first message to the leaf, with each message’s siblings', () => {
    const tree = example();
    expect(tree.pathTo(3).map((n) => n.id)).toEqual([1, 2, 3]);
    expect(tree.pathTo(6).map((n) => n.id)).toEqual([1, 5, 6]);
    expect(tree.siblings(3)).toEqual([3, 4]);
    expect(tree.siblings(5)).toEqual([2, 5]);
    expect(tree.newestUnder(2)).toBe(4);
    expect(tree.newestUnder(null)).toBe(6);
  });

  it('hides what is under a deleted message', () => {
    const tree = example([2]);
    expect(tree.pathTo(3).map((n) => n.id)).toEqual([1]);
    expect(tree.siblings(5)).toEqual([5]);
    expect(tree.newestUnder(1)).toBe(6);
    expect(tree.isUnder(3, 2)).toBe(true);
    expect(tree.isUnder(6, 2)).toBe(false);
  });

  it('walks a 50,000-message chain and a cycle without recursion or end', () => {
    const chain = new Tree(Array.from({ length: 50_000 }, (_, i) => ({ id: i + 1, parent_id: i === 0 ? null : i })));
    expect(chain.pathTo(50_000)).toHaveLength(50_000);
    expect(chain.newestUnder(1)).toBe(50_000);
    const cycle = new Tree([
      { id: 1, parent_id: 2 },
      { id: 2, parent_id: 1 },
    ]);
    expect(cycle.pathTo(1).length).toBeLessThanOrEqual(3);
  });
});
