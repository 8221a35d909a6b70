/**
 * The report's replay (how steady calls ran: replayed from a tape, or why they
 * walk the plan): decoded from both wire versions, tolerated when absent or
 * malformed, and shown as one text line under the timing bar (a hostile
 * reason is in security.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { decodeBundle } from '../view/decode';
import { renderTimingBar, replayLine } from '../view/timing_bar';
import { encodeV2 } from './encode_v2';
import { loadFixture, mountView, useStubbedLayout } from './fixtures';

useStubbedLayout();

const REPLAYED = { calls: 124, replayed: 122, launches: 55, run_as: 51, walks_because: null };
const WALKED = { calls: 6, replayed: 0, launches: null, run_as: null, walks_because: 'index_put.default runs in PyTorch' };

/** mlp_bundle.json (schema v1) with `replay` set on its report, or left out when undefined. */
function bundle(replay?: unknown): any {
  const value = loadFixture('mlp_bundle.json');
  if (replay !== undefined) {
    value.reports[0].replay = replay;
  }
  return value;
}

function replayElement(value: any): HTMLElement | null {
  const report = decodeBundle(value).reports[0];
  const node = renderTimingBar(report, () => '#123456', () => undefined);
  document.body.appendChild(node);
  return node.querySelector('.jp-torchfuser-timing-replay');
}

describe('replay: decoding', () => {
  it('reads the field from schema v2 and v1 reports', () => {
    expect(decodeBundle(encodeV2(bundle(REPLAYED))).reports[0].replay).toEqual(REPLAYED);
    expect(decodeBundle(bundle(WALKED)).reports[0].replay).toEqual(WALKED);
  });

  it('reads how many calls replayed at new sizes, or why those walk, where the plan has symbols', () => {
    const sized = { ...REPLAYED, new_sizes: 90, new_sizes_walk_because: null };
    expect(decodeBundle(encodeV2(bundle(sized))).reports[0].replay).toEqual({ ...REPLAYED, new_sizes: 90 });
    const walks = { ...REPLAYED, new_sizes: 0, new_sizes_walk_because: 'a PyTorch op runs between its launches' };
    expect(decodeBundle(bundle(walks)).reports[0].replay).toEqual(walks);
    expect(decodeBundle(bundle({ ...REPLAYED, new_sizes: -2, new_sizes_walk_because: 3 })).reports[0].replay).toEqual(
      REPLAYED
    );
  });

  it('is null in reports written before the field, and malformed parts are dropped', () => {
    expect('replay' in loadFixture('mlp_bundle.json').reports[0]).toBe(false);
    expect(decodeBundle(encodeV2(bundle())).reports[0].replay).toBeNull();
    expect(decodeBundle(bundle('yes')).reports[0].replay).toBeNull();
    const odd = { calls: '3', replayed: -1, launches: 2.5, run_as: 'x', walks_because: 7 };
    expect(decodeBundle(bundle(odd)).reports[0].replay).toEqual({
      calls: 0,
      replayed: 0,
      launches: null,
      run_as: null,
      walks_because: null
    });
  });
});

describe('replay: the line under the timing bar', () => {
  it('says how many calls replayed, and how chaining cut their launches', () => {
    expect(replayElement(bundle(REPLAYED))!.textContent).toBe(
      'Steady calls: 122 of 124 replayed from a tape (55 launches run as 51)'
    );
    expect(replayLine({ ...REPLAYED, launches: 2, run_as: 2 })).toBe('Steady calls: 122 of 124 replayed from a tape');
  });

  it('says how many replayed at new sizes, or why those walk the plan', () => {
    expect(replayElement(bundle({ ...REPLAYED, new_sizes: 90, new_sizes_walk_because: null }))!.textContent).toBe(
      'Steady calls: 122 of 124 replayed from a tape (55 launches run as 51), 90 at new sizes'
    );
    expect(replayLine({ ...REPLAYED, new_sizes: 0, new_sizes_walk_because: 'an output is a view' })).toBe(
      'Steady calls: 122 of 124 replayed from a tape (55 launches run as 51); new sizes walk the plan: an output is a view'
    );
  });

  it('says why steady calls walk the plan', () => {
    expect(replayElement(bundle(WALKED))!.textContent).toBe('Steady calls walk the plan: index_put.default runs in PyTorch');
  });

  it('is absent without the field, before any call, and without a reason', () => {
    expect(replayElement(bundle())).toBeNull();
    expect(replayLine({ ...WALKED, calls: 0 })).toBeNull();
    expect(replayLine({ ...WALKED, walks_because: null })).toBeNull();
  });

  it('is part of the explorer view', async () => {
    const view = await mountView(encodeV2(bundle(REPLAYED)));
    expect(view.node.querySelector('.jp-torchfuser-timing .jp-torchfuser-timing-replay')!.textContent).toContain(
      '122 of 124 replayed from a tape'
    );
  });
});
