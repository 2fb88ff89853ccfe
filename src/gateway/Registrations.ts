import { randomBytes, randomUUID } from 'node:crypto';
import { z } from 'zod';
import { type Directory, hashToken } from '../deliver/Directory.js';
import { EntityActor, type EntityActorDeps } from '../deliver/EntityActor.js';
import { BridgeError, ErrorCode } from '../errors.js';
import type { Federation } from '../federation/Federation.js';
import type { Lifecycle } from '../kernel/Lifecycle.js';
import type { Logger } from '../log/logger.js';
import { addressOf } from '../send/Router.js';
import { type EntityRecord, insertEntity } from '../store/entities.js';
import type { Store } from '../store/openStore.js';
import {
  type Address,
  describeIssues,
  type EntityKind,
  entityNameSchema,
  groupsSchema,
} from '../wire/envelope.js';
import type { Hlc } from '../wire/hlc.js';
import type { PaneTarget } from '../wire/paneTarget.js';

export interface RegisterRequest {
  kind: EntityKind;
  name: string;
  groups?: string[] | undefined;
  pane?: PaneTarget | undefined;
}

export interface Registration {
  gid: string;
  token: string;
  name: string;
  host: string;
  kind: EntityKind;
}

/** An entity registered under a gid and token chosen before (a spawned agent's, U4). */
export type KnownRegistration = RegisterRequest & { gid: string; token: string };

export interface RegistrationsDeps {
  store: Store;
  hlc: Hlc;
  host: string;
  logger: Logger;
  directory: Directory;
  federation: Federation | undefined;
  entityDeps: EntityActorDeps;
  /** Checks a pane exists before an entity is registered with it; throws a BridgeError if not. */
  checkPane: ((pane: PaneTarget) => Promise<void>) | undefined;
  lifecycle: Lifecycle;
}

/** What a registration names, by the one rule for names and groups (R-U8: no wildcard groups). */
const registrationSchema = z.object({ name: entityNameSchema, groups: groupsSchema.optional() });

/** A capability token: shown once to the registrant, stored hashed. */
export function newToken(): string {
  return `brt_${randomBytes(24).toString('base64url')}`;
}

/**
 * Local entities joining and leaving: the stored record, the entity actor, and (federated) its
 * inbox and presence. Undelivered messages of an entity that leaves are dead-lettered, never dropped.
 */
export class Registrations {
  constructor(private readonly deps: RegistrationsDeps) {}

  /** Registers a local entity and returns its capability token (shown once, stored hashed). */
  async register(request: RegisterRequest): Promise<Registration> {
    this.deps.lifecycle.assertRunning();
    const checked = registrationSchema.safeParse(request);
    if (!checked.success) {
      throw new BridgeError(ErrorCode.badRequest, `cannot register: ${describeIssues(checked.error)}`);
    }
    const { directory, host, checkPane } = this.deps;
    if (directory.hasName(request.name)) {
      throw new BridgeError(
        ErrorCode.nameTaken,
        `an entity named "${request.name}" is already registered on ${host}; pick another name`,
      );
    }
    if (request.pane && checkPane) await checkPane(request.pane);
    const token = newToken();
    const gid = randomUUID();
    await this.add({ ...request, gid, token });
    return { gid, token, name: request.name, host, kind: request.kind };
  }

  /** A spawned agent, registered under the gid and token it was launched with. */
  async registerSpawned(entity: KnownRegistration): Promise<void> {
    this.deps.lifecycle.assertRunning();
    if (this.deps.directory.hasName(entity.name)) {
      throw new BridgeError(
        ErrorCode.nameTaken,
        `an entity named "${entity.name}" is already registered on ${this.deps.host}`,
      );
    }
    await this.add(entity);
  }

  private async add(request: KnownRegistration): Promise<void> {
    const { store, hlc, host, directory, federation, entityDeps, logger } = this.deps;
    const record: EntityRecord = {
      gid: request.gid,
      name: request.name,
      kind: request.kind,
      groups: request.groups ?? [],
      pane: request.pane ?? null,
      tokenHash: hashToken(request.token),
      created: hlc.tick(),
    };
    insertEntity(store, record);
    const entity = EntityActor.create(record, host, entityDeps);
    directory.add(entity);
    entity.start();
    await store.batch.flush();
    await federation?.addEntity(entity);
    logger.info({ gid: record.gid, name: record.name, kind: record.kind }, 'entity registered');
  }

  /** Deregisters an entity; its undelivered messages are dead-lettered, never dropped. */
  async deregister(address: string): Promise<Address> {
    const { store, host, directory, federation, logger, lifecycle } = this.deps;
    lifecycle.assertRunning();
    const entity = directory.resolve(address);
    const address_ = addressOf(entity, host);
    directory.remove(entity);
    entity.deregister();
    await store.batch.flush();
    await federation?.removeEntity(entity.gid);
    logger.info({ gid: entity.gid, name: entity.record.name }, 'entity deregistered');
    return address_;
  }
}
