import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

/** Bytes of a recorded stream under test/fixtures/. */
export function fixture(path: string): Buffer {
  return readFileSync(fileURLToPath(new URL(`../fixtures/${path}`, import.meta.url)))
}

/** A `.data.jsonl` recording (SSE data payloads one per line) framed back into SSE. */
export function sseFromDataLines(path: string, withDone = true): Buffer {
  const lines = fixture(path).toString('utf8').split('\n').filter((l) => l.trim() !== '')
  return Buffer.from(lines.map((l) => `data: ${l}\n\n`).join('') + (withDone ? 'data: [DONE]\n\n' : ''))
}

/** Offsets to split a buffer at: every byte for small inputs, an even sample of `max` for big ones. */
export function splitPoints(length: number, max = 600): number[] {
  if (length <= max) return Array.from({ length: length + 1 }, (_, i) => i)
  const step = length / max
  return Array.from({ length: max + 1 }, (_, i) => Math.min(length, Math.round(i * step)))
}
