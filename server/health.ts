/**
 * The standard gRPC health service (grpc.health.v1.Health) backed by a {@link HealthStatus}.
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ConnectRouter } from "@connectrpc/connect";
import {
  Health,
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthCheckResponseSchema,
} from "../gen/grpc/health/v1/health_pb.js";

export { ServingStatus };

/**
 * The serving status of the server ("") and of named services, which can be changed at any time
 * and watched. The whole server ("") starts SERVING; a service is known once it has been given a
 * status (in the constructor or with {@link HealthStatus.set}).
 */
export class HealthStatus {
  readonly #statuses = new Map<string, ServingStatus>([["", ServingStatus.SERVING]]);
  readonly #waiters = new Set<() => void>();
  #version = 0;

  /** @param services fully-qualified service names that start SERVING. */
  constructor(services: Iterable<string> = []) {
    for (const service of services) {
      this.#statuses.set(service, ServingStatus.SERVING);
    }
  }

  /** The status of `service` ("" = the whole server), or undefined if it is unknown. */
  get(service: string): ServingStatus | undefined {
    return this.#statuses.get(service);
  }

  /** Sets the status of `service` ("" = the whole server), making it known; wakes watchers. */
  set(service: string, status: ServingStatus): void {
    if (this.#statuses.get(service) === status) {
      return;
    }
    this.#statuses.set(service, status);
    this.#version++;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const wake of waiters) {
      wake();
    }
  }

  /** Marks the server and every known service NOT_SERVING, e.g. when shutting down. */
  shutdown(): void {
    for (const service of [...this.#statuses.keys()]) {
      this.set(service, ServingStatus.NOT_SERVING);
    }
  }

  /**
   * Yields the status of `service` now (SERVICE_UNKNOWN if unknown), then each time it changes,
   * until `signal` aborts; then it returns. Changes made while the consumer is busy are not lost:
   * the latest status is yielded next (intermediate ones may be skipped), never the same twice
   * in a row.
   */
  async *watch(service: string, signal: AbortSignal): AsyncGenerator<ServingStatus, void> {
    let last: ServingStatus | undefined;
    while (!signal.aborted) {
      const version = this.#version;
      const current = this.get(service) ?? ServingStatus.SERVICE_UNKNOWN;
      if (current !== last) {
        last = current;
        yield current;
      }
      await this.#changedSince(version, signal);
    }
  }

  /** Resolves once the version moves past `version` or `signal` aborts. */
  #changedSince(version: number, signal: AbortSignal): Promise<void> {
    if (this.#version !== version || signal.aborted) {
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const wake = () => {
        this.#waiters.delete(wake);
        signal.removeEventListener("abort", wake);
        resolve();
      };
      this.#waiters.add(wake);
      signal.addEventListener("abort", wake, { once: true });
    });
  }
}

/**
 * Registers grpc.health.v1.Health on `router`, answering from `status`:
 * - Check returns the current status of the service ("" = the whole server), or fails with
 *   NOT_FOUND for a service `status` does not know.
 * - Watch sends the current status (SERVICE_UNKNOWN for an unknown service, without failing),
 *   then every change, until the client cancels or the server ends the call.
 *
 * @returns the router, for chaining.
 */
export function registerHealth(router: ConnectRouter, status: HealthStatus): ConnectRouter {
  return router.service(Health, {
    check(request) {
      const current = status.get(request.service);
      if (current === undefined) {
        throw new ConnectError(`unknown service "${request.service}"`, Code.NotFound);
      }
      return create(HealthCheckResponseSchema, { status: current });
    },
    async *watch(request, context) {
      for await (const current of status.watch(request.service, context.signal)) {
        yield create(HealthCheckResponseSchema, { status: current });
      }
    },
  });
}
