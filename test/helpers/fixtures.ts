import { readFileSync } from 'node:fs'
import { repoPath } from './paths.ts'

/** Bytes of a recorded stream under test/fixtures/. */
export function fixture(path: string): Buffer {
  return readFileSync(repoPath('test', 'fixtures', path))
}

/** A `.data.jsonl` recording (SSE data payloads one per line) framed back into SSE. */
export function sseFromDataLines(path: string, withDone = true): Buffer {
  const lines = fixture(path)
    .toString('utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
  return Buffer.from(lines.map((l) => `data: ${l}\n\n`).join('') + (withDone ? 'data: [DONE]\n\n' : ''))
}

/** Offsets to split at: every byte for small inputs, else `samples` spread evenly plus the edges. */
export function splitOffsets(length: number, samples = 400): number[] {
  if (length <= samples) return Array.from({ length: length + 1 }, (_, i) => i)
  const out = new Set<number>([0, 1, 2, 3, length - 3, length - 2, length - 1, length])
  for (let i = 0; i < samples; i++) out.add(Math.floor((i * length) / samples) + (i % 7))
  return [...out].filter((o) => o >= 0 && o <= length).sort((a, b) => a - b)
}
