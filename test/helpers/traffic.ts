/**
 * A mix of requests through a proxy's simulator route (`/sim`) that makes every llm_ metric family
 * report: ok streams with and without the provider's usage, a non-streamed answer, an HTTP error,
 * an error event inside a stream. Returns how many requests it sent.
 */
export async function driveMixedTraffic(proxyUrl: string, prefix = '/sim'): Promise<number> {
  const plan = {
    ttft_ms: 5,
    first_tokens: 2,
    chunks: [
      [5, 1],
      [5, 3],
      [5, 1],
    ],
  }
  const send = async (body: Record<string, unknown>, sim: Record<string, unknown> = plan): Promise<void> => {
    const res = await fetch(`${proxyUrl}${prefix}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-tokentap-sim': JSON.stringify(sim) },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], ...body }),
    })
    await res.text()
  }
  await send({ stream: true, stream_options: { include_usage: true } })
  await send({ stream: true })
  await send({ stream: false })
  await send({ stream: true }, { ...plan, status: 503 })
  await send({ stream: true }, { ...plan, error_after: 2 })
  return 5
}
