// sluice's errors: every one is a SluiceError; callers branch with instanceof on the subclasses.

export class SluiceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Bad input, refused before anything was consumed; field names the offending field. */
export class InvalidArgumentError extends SluiceError {
  readonly field: string;
  readonly reason: string;
  constructor(field: string, reason: string) {
    super(`sluice: invalid ${field}: ${reason}`);
    this.field = field;
    this.reason = reason;
  }
}

/** The policy named is not one the service holds. */
export class PolicyNotFoundError extends SluiceError {}

/** The door or the store cannot do this for the policy's strategy. */
export class OperationNotSupportedError extends SluiceError {}

/** The service or store could not answer, and the fail mode is closed (or the call is not a check). */
export class ServiceUnavailableError extends SluiceError {}

/** The service refused the token (or its absence), or the token lacks the scope the call needs. */
export class UnauthenticatedError extends SluiceError {}
