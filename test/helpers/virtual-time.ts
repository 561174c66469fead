import { createServer } from 'node:http'
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http'
import { request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { validateConfig } from '../../src/config/load-config.ts'
import type { SimulatorConfig } from '../../src/config/schema.ts'
import { buildSimulator } from '../../src/sim/sim-app.ts'
import type { SimPlanRequest } from '../../src/sim/schedule.ts'
import { simRoute } from './proxy.ts'
import type { RunningProxy } from './proxy.ts'

/**
 * Tests on virtual time: the proxy reads a clock the test sets (`buildApp(config, { now })`),
 * and a stand-in upstream holds its response back and writes it one step at a time when told.
 * A test sets the clock to t_k, lets the upstream write step k, and waits until the client has
 * received those bytes (the proxy reads the clock when the read arrives and when it writes it,
 * both before the client can see it); only then does the clock move. Every figure the proxy
 * computes is then exact (TTFT sum exactly 3 × 0.06, ITL buckets exactly), and no test sleeps.
 */

/** A monotonic clock in ms that only the test moves. Pass `clock.now` as `startProxy(…, { now })`. */
export class VirtualClock {
  #t: number
  constructor(start = 0) {
    this.#t = start
  }

  readonly now = (): number => this.#t

  set(ms: number): void {
    if (ms < this.#t) throw new Error(`the virtual clock runs forwards only: ${ms} < ${this.#t}`)
    this.#t = ms
  }
}

/** Within float rounding of `want`: a figure on virtual time is a sum of ms differences over 1000, exact but for that. */
export function near(found: number, want: number): boolean {
  return Math.abs(found - want) < 1e-9
}

/** What a client has received so far, summed over all its responses; waits are event-driven. */
export class Received {
  heads = 0
  bytes = 0
  ends = 0
  readonly #waiters = new Set<() => void>()

  /** Records progress and wakes the waits it satisfies. */
  note(change: { heads?: number; bytes?: number; ends?: number }): void {
    this.heads += change.heads ?? 0
    this.bytes += change.bytes ?? 0
    this.ends += change.ends ?? 0
    for (const w of [...this.#waiters]) w()
  }

  /** Resolves once `done()` holds; rejects after `timeoutMs` of wall time (a stuck test, not a slow one). */
  until(what: string, done: () => boolean, timeoutMs = 20_000): Promise<void> {
    if (done()) return Promise.resolve()
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (!done()) return
        this.#waiters.delete(check)
        clearTimeout(timer)
        resolve()
      }
      const timer = setTimeout(() => {
        this.#waiters.delete(check)
        reject(new Error(`waited ${timeoutMs} ms for the client to receive ${what} (heads ${this.heads}, bytes ${this.bytes}, ends ${this.ends})`))
      }, timeoutMs)
      this.#waiters.add(check)
    })
  }
}

/** A `fetch` for SDK clients (`new OpenAI({ fetch })`) that counts what reaches the SDK in `received`. */
export function watchedFetch(received: Received): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init)
    received.note({ heads: 1 })
    if (res.body === null) {
      received.note({ ends: 1 })
      return res
    }
    const counter = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        controller.enqueue(chunk)
        received.note({ bytes: chunk.byteLength })
      },
      flush() {
        received.note({ ends: 1 })
      },
    })
    return new Response(res.body.pipeThrough(counter), { status: res.status, statusText: res.statusText, headers: res.headers })
  }
}

/** A plain node:http client request whose progress shows in `received`; resolves with the whole body. */
export interface RawCall {
  readonly done: Promise<{ status: number; body: Buffer }>
  /** Destroys the request (a client that leaves). */
  abort(): void
}

export function rawCall(received: Received, url: string, opts: { method?: string; headers?: OutgoingHttpHeaders; body?: string | Buffer } = {}): RawCall {
  const req = request(url, { method: opts.method ?? 'POST', headers: opts.headers, agent: false })
  const done = new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
    req.on('response', (res: IncomingMessage) => {
      received.note({ heads: 1 })
      const parts: Buffer[] = []
      res.on('data', (c: Buffer) => {
        parts.push(c)
        received.note({ bytes: c.length })
      })
      res.on('end', () => {
        received.note({ ends: 1 })
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts) })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
  })
  done.catch(() => {})
  req.end(opts.body)
  return { done, abort: () => req.destroy() }
}

/** One step of a held response: the writes up to and including one that puts bytes on the wire. */
export interface Step {
  /** `head`: headers only (flushHeaders); `write`: a body write (the first one carries the headers); `end`: the response's end. */
  readonly kind: 'head' | 'write' | 'end'
  /** Body bytes this step writes. */
  readonly bytes: number
}

/** A response the stand-in upstream holds back: everything its handler wrote, sent step by step. */
export class HeldResponse {
  readonly steps: Step[] = []
  /** The status the handler wrote. */
  status = 0
  /** Virtual times of the steps, in ms from the request, when the upstream knows them (the held simulator does). */
  times: number[] | undefined
  readonly #runs: (() => void)[][] = []
  #ops: (() => void)[] = []
  #sent = 0
  readonly #complete: Promise<void>
  #resolve!: () => void

  constructor(res: ServerResponse) {
    this.#complete = new Promise((resolve) => (this.#resolve = resolve))
    const { writeHead, write, end, flushHeaders } = res
    const step = (kind: Step['kind'], bytes: number): void => {
      this.steps.push({ kind, bytes })
      this.#runs.push(this.#ops)
      this.#ops = []
    }
    const size = (chunk: unknown): number => (typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk instanceof Uint8Array ? chunk.byteLength : 0)
    res.writeHead = ((...args: Parameters<typeof writeHead>) => {
      this.status = args[0]
      this.#ops.push(() => writeHead.apply(res, args))
      return res
    }) as typeof writeHead
    res.flushHeaders = () => {
      this.#ops.push(() => flushHeaders.call(res))
      step('head', 0)
    }
    res.write = ((...args: Parameters<typeof write>) => {
      this.#ops.push(() => (write as (...a: unknown[]) => boolean).apply(res, args))
      step('write', size(args[0]))
      return true
    }) as typeof write
    res.end = ((...args: unknown[]) => {
      this.#ops.push(() => (end as (...a: unknown[]) => unknown).apply(res, args))
      step('end', size(args[0]))
      this.#resolve()
      return res
    }) as typeof end
  }

  /** Resolves once the handler has ended the response (every step is known). */
  get complete(): Promise<void> {
    return this.#complete
  }

  /** Steps sent so far. */
  get sent(): number {
    return this.#sent
  }

  /** Body bytes of the first `n` steps. */
  bytesThrough(n: number): number {
    let total = 0
    for (let i = 0; i < n; i++) total += this.steps[i].bytes
    return total
  }

  /** Writes the next step to the proxy. */
  send(): Step {
    const i = this.#sent++
    if (i >= this.steps.length) throw new Error('every step of this response was sent')
    for (const op of this.#runs[i]) op()
    return this.steps[i]
  }
}

/** A stand-in upstream on port 0 whose responses wait for the test, step by step. */
export interface HeldUpstream {
  readonly url: string
  /** The next request's response, once its handler ended it (requests in arrival order). */
  next(): Promise<HeldResponse>
  close(): Promise<void>
}

class Arrivals {
  readonly #ready: HeldResponse[] = []
  readonly #waiting: ((r: HeldResponse) => void)[] = []
  push(r: HeldResponse): void {
    void r.complete.then(() => {
      const w = this.#waiting.shift()
      if (w !== undefined) w(r)
      else this.#ready.push(r)
    })
  }

  next(): Promise<HeldResponse> {
    const r = this.#ready.shift()
    return r !== undefined ? Promise.resolve(r) : new Promise((resolve) => this.#waiting.push(resolve))
  }
}

/** Holds whatever `handler` writes (it should end its response without waiting on timers of its own). */
export async function startHeldUpstream(handler: (req: IncomingMessage, res: ServerResponse, body: Buffer) => void): Promise<HeldUpstream> {
  const arrivals = new Arrivals()
  const server = createServer((req, res) => {
    const parts: Buffer[] = []
    req.on('data', (c: Buffer) => parts.push(c))
    req.on('end', () => {
      const held = new HeldResponse(res)
      arrivals.push(held)
      handler(req, res, Buffer.concat(parts))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    next: () => arrivals.next(),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/**
 * The built-in simulator (every format it speaks) as a held upstream. A request's
 * `x-tokentap-sim` plan is played with no waits and held; its steps get the plan's times:
 * the head at 0, content chunk i at its due time, the end with the step before it (a whole
 * answer at the last chunk's due time, an error status at 0).
 */
export async function startHeldSimulator(simulator: Record<string, unknown> = {}): Promise<HeldUpstream> {
  const cfg = validateConfig({ routes: [simRoute('/sim', simulator)] }).routes[0].simulator as SimulatorConfig
  const sim = buildSimulator(cfg)
  const arrivals = new Arrivals()
  sim.addHook('onRequest', async (request, reply) => {
    const header = request.headers['x-tokentap-sim']
    const plan = typeof header === 'string' ? (JSON.parse(header) as SimPlanRequest) : undefined
    const held = new HeldResponse(reply.raw)
    const due: number[] = [plan?.ttft_ms ?? 0]
    for (const [gap] of plan?.chunks ?? []) due.push(due[due.length - 1] + gap)
    if (plan?.chunks !== undefined) request.headers['x-tokentap-sim'] = JSON.stringify({ ...plan, ttft_ms: 0, chunks: plan.chunks.map(([, k]) => [0, k]) })
    void held.complete.then(() => (held.times = simTimes(held, due)))
    arrivals.push(held)
  })
  await sim.listen({ host: '127.0.0.1', port: 0 })
  return {
    url: `http://127.0.0.1:${(sim.server.address() as AddressInfo).port}`,
    next: () => arrivals.next(),
    close: async () => {
      sim.server.closeAllConnections()
      await sim.close()
    },
  }
}

function simTimes(held: HeldResponse, due: readonly number[]): number[] {
  const { steps } = held
  if (steps.length === 1 && steps[0].kind === 'end') return [held.status >= 200 && held.status < 300 ? due[due.length - 1] : 0]
  const times = [0]
  for (let i = 1; i < steps.length; i++) times.push(steps[i].kind === 'end' ? times[i - 1] : due[i - 1])
  return times
}

/**
 * Plays the upstream's next response to `client` on virtual time: step i at `start + times[i]`
 * (`start`: the clock when called, which is also the request's t_req), waiting after each until
 * the client has it. The client request must already be on its way. `times` defaults to the
 * held simulator's; `steps` stops early (a client that leaves mid-stream), the rest unsent.
 */
export async function playSteps(clock: VirtualClock, upstream: HeldUpstream, client: Received, options: { times?: readonly number[]; steps?: number } = {}): Promise<HeldResponse> {
  const start = clock.now()
  const held = await upstream.next()
  const at = options.times ?? held.times
  if (at === undefined || at.length !== held.steps.length) throw new Error(`${held.steps.length} steps (${held.steps.map((s) => s.kind).join(' ')}) and ${at?.length ?? 'no'} times`)
  const { heads, bytes, ends } = client
  for (let i = 0; i < (options.steps ?? held.steps.length); i++) {
    clock.set(start + at[i])
    const step = held.send()
    const want = bytes + held.bytesThrough(i + 1)
    await client.until(`step ${i} (${step.kind})`, () => client.heads > heads && client.bytes >= want && (step.kind !== 'end' || client.ends > ends))
  }
  return held
}

/** `playSteps` to the end, then waits until the proxy has recorded the request (it does on the response's close). */
export async function play(proxy: RunningProxy, clock: VirtualClock, upstream: HeldUpstream, client: Received, times?: readonly number[]): Promise<HeldResponse> {
  const logged = proxy.logs.filter((l) => l.msg === 'request').length
  const held = await playSteps(clock, upstream, client, { times })
  await proxy.waitForRequests(logged + 1)
  return held
}
