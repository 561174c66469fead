import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule'
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor'
import { Deployment } from 'kubernetes-models/apps/v1/Deployment'
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler'
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy'
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget'
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap'
import { Namespace } from 'kubernetes-models/v1/Namespace'
import { Service } from 'kubernetes-models/v1/Service'
import { parse } from 'yaml'
import { validateConfig } from '../../src/config/load-config.ts'
import { ROOT } from '../helpers/paths.ts'

const K8S = join(ROOT, 'deploy', 'kubernetes')
const load = (file: string): Record<string, unknown> => parse(readFileSync(join(K8S, file), 'utf8')) as Record<string, unknown>

/** Each kind the kustomization holds, validated by the schema of its apiVersion. */
const MODELS: Record<string, { apiVersion: string; validate: (obj: Record<string, unknown>) => void }> = {
  Namespace: { apiVersion: 'v1', validate: (o) => new Namespace(o).validate() },
  ConfigMap: { apiVersion: 'v1', validate: (o) => new ConfigMap(o).validate() },
  Service: { apiVersion: 'v1', validate: (o) => new Service(o).validate() },
  Deployment: { apiVersion: 'apps/v1', validate: (o) => new Deployment(o).validate() },
  NetworkPolicy: { apiVersion: 'networking.k8s.io/v1', validate: (o) => new NetworkPolicy(o).validate() },
  PodDisruptionBudget: { apiVersion: 'policy/v1', validate: (o) => new PodDisruptionBudget(o).validate() },
  HorizontalPodAutoscaler: { apiVersion: 'autoscaling/v2', validate: (o) => new HorizontalPodAutoscaler(o).validate() },
  ServiceMonitor: { apiVersion: 'monitoring.coreos.com/v1', validate: (o) => new ServiceMonitor(o as unknown as ConstructorParameters<typeof ServiceMonitor>[0]).validate() },
  PrometheusRule: { apiVersion: 'monitoring.coreos.com/v1', validate: (o) => new PrometheusRule(o as unknown as ConstructorParameters<typeof PrometheusRule>[0]).validate() },
}

t.test('every object of the kustomization is valid against the Kubernetes (and Prometheus Operator) schema of its apiVersion', async (t) => {
  const { resources } = load('kustomization.yaml') as { resources: string[] }
  for (const file of resources) {
    const obj = load(file)
    const model = MODELS[obj.kind as string]
    t.ok(model, `${file}: a schema for ${String(obj.kind)}`)
    t.equal(obj.apiVersion, model.apiVersion, `${file}: ${String(obj.kind)} is ${model.apiVersion}`)
    t.doesNotThrow(() => model.validate(obj), `${file} validates`)
  }
})

t.test('the schemas catch a wrong manifest (the validation is not a no-op)', async (t) => {
  const deployment = load('deployment.yaml') as { spec: { template: { spec: { containers: { resources: { limits: Record<string, unknown> } }[] } } } }
  deployment.spec.template.spec.containers[0].resources.limits.memory = { mebibytes: 512 }
  t.throws(() => MODELS.Deployment.validate(deployment as unknown as Record<string, unknown>), 'a quantity that is neither string nor number is rejected')
  const monitor = load('servicemonitor.yaml') as { spec: { endpoints: { port: unknown }[] } }
  monitor.spec.endpoints[0].port = 9464
  t.throws(() => MODELS.ServiceMonitor.validate(monitor as unknown as Record<string, unknown>), 'a numeric endpoint port name is rejected')
})

/** Kubernetes quantities as the manifests write them: Mi and Gi, whole CPUs and millicores. */
const mib = (q: string): number => {
  const m = /^(\d+(?:\.\d+)?)(Mi|Gi)$/.exec(q)
  if (m === null) throw new Error(`memory quantity ${q}: expected Mi or Gi`)
  return Number(m[1]) * (m[2] === 'Gi' ? 1024 : 1)
}
const cores = (q: string): number => (q.endsWith('m') ? Number(q.slice(0, -1)) / 1000 : Number(q))

/** What the pod is sized for (docs/operations.md, "Sizing a pod"); its label sets are the ConfigMap's budget. */
const PLAN = { streams: 2000, gcHeadroom: 1.25 }

t.test('the Deployment\u2019s memory fits the measured need of the process the ConfigMap runs, and the docs state that arithmetic', async (t) => {
  const measured = JSON.parse(readFileSync(join(ROOT, 'bench', 'results', 'pod-sizing.json'), 'utf8')) as {
    workers: number
    idle_rss_mib: number
    rss_per_open_stream_kib: number
    rss_per_label_set_kib: number
    cores_per_open_stream: number
  }
  const configMap = load('configmap.yaml') as { data: Record<string, string> }
  const config = validateConfig(parse(configMap.data['config.yaml']))
  t.equal(config.server.workers, measured.workers, 'the figures were measured with the ConfigMap\u2019s number of processes')
  const streamsMib = (PLAN.streams * measured.rss_per_open_stream_kib) / 1024
  // The budget, plus the overflow set each route records beyond it.
  const labelSets = config.limits.max_label_sets + config.routes.length
  const setsMib = (labelSets * measured.rss_per_label_set_kib) / 1024
  const need = (measured.idle_rss_mib + streamsMib + setsMib) * PLAN.gcHeadroom
  const deployment = load('deployment.yaml') as { spec: { template: { spec: { containers: { resources: { requests: Record<string, string>; limits: Record<string, string> } }[] } } } }
  const { requests, limits } = deployment.spec.template.spec.containers[0].resources
  t.ok(mib(limits.memory) >= need, `memory limit ${limits.memory} ≥ ${need.toFixed(0)} MiB measured need`)
  t.ok(mib(requests.memory) >= need, `memory request ${requests.memory} ≥ the need: the scheduler reserves it`)
  t.ok(cores(limits.cpu) >= config.server.workers && Number.isInteger(cores(limits.cpu)), 'a whole CPU per process')

  // The HPA scales on memory below the limit, and before the planned streams are reached.
  const hpa = load('hpa.yaml') as { spec: { metrics: { type: string; resource?: { name: string; target: { averageUtilization: number } } }[] } }
  const memory = hpa.spec.metrics.find((m) => m.resource?.name === 'memory')?.resource?.target.averageUtilization
  t.ok(memory !== undefined && memory < 100, `the HPA scales on memory (${memory} % of the request)`)
  t.ok(((memory ?? 100) / 100) * mib(requests.memory) < mib(limits.memory), 'its target is below the memory limit')

  const docs = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8')
  for (const figure of [measured.idle_rss_mib, measured.rss_per_open_stream_kib, measured.rss_per_label_set_kib]) t.match(docs, String(figure), `docs/operations.md states the measured ${figure}`)
  t.match(docs, `${need.toFixed(0)} MiB`, `docs/operations.md states the need, ${need.toFixed(0)} MiB`)
})

t.test('a stopping pod is scraped once more after its drain: linger ≥ interval + timeout, and the grace period covers preStop, drain and linger', async (t) => {
  const configMap = load('configmap.yaml') as { data: Record<string, string> }
  const { server } = validateConfig(parse(configMap.data['config.yaml']))
  const monitor = load('servicemonitor.yaml') as { spec: { scrapeClassicHistograms?: boolean; endpoints: { interval: string; scrapeTimeout: string }[] } }
  const seconds = (d: string): number => Number(/^(\d+)s$/.exec(d)?.[1])
  const [endpoint] = monitor.spec.endpoints
  t.ok(
    server.drain_linger_seconds >= seconds(endpoint.interval) + seconds(endpoint.scrapeTimeout),
    `drain_linger_seconds ${server.drain_linger_seconds} ≥ ${endpoint.interval} + ${endpoint.scrapeTimeout}`,
  )
  const adminService = load('service-admin.yaml') as { spec: { publishNotReadyAddresses?: boolean } }
  t.equal(adminService.spec.publishNotReadyAddresses, true, 'the admin Service keeps a terminating pod in its endpoints, so it is still scraped')
  const deployment = load('deployment.yaml') as { spec: { template: { spec: { terminationGracePeriodSeconds: number; containers: { lifecycle: { preStop: { exec: { command: string[] } } } }[] } } } }
  const pod = deployment.spec.template.spec
  const preStop = Number(pod.containers[0].lifecycle.preStop.exec.command[1])
  const needed = preStop + server.drain_seconds + server.drain_linger_seconds
  t.ok(
    pod.terminationGracePeriodSeconds > needed,
    `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} > preStop ${preStop} + drain ${server.drain_seconds} + linger ${server.drain_linger_seconds}`,
  )
  // The schema package (4.4.4) predates the field and lets unknown fields through: checked here.
  t.equal(monitor.spec.scrapeClassicHistograms, true, 'the ServiceMonitor keeps classic buckets beside native histograms')
})
