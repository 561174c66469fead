/**
 * Waits for a condition by asking again every few ms: for what sends no event (a child process's
 * metrics, a collector's inbox). `timeoutMs` only catches a stuck test: it is far above any wait
 * a loaded machine causes, and no figure depends on it.
 */
export async function eventually<T>(what: string, read: () => Promise<T> | T, done: (value: T) => boolean, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (done(value)) return value
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}
