import { invalidArgument } from "../errors.js";
import { checkPasswordPolicy } from "./password-policy.js";
import type { PasswordHasher } from "./passwords.js";
import type { User, UserStore } from "./user-store.js";

/** Creating users and changing their password or active flag. */

export interface NewUserInput {
  username: string;
  email: string;
  password: string;
  roles: readonly string[];
}

const usernamePattern = /^[A-Za-z0-9._@-]{3,128}$/;

export function createUserManagement(deps: {
  users: UserStore;
  passwords: PasswordHasher;
  /** Called after a change to a user, so cached state is dropped. */
  forget: (userId: string) => void;
}) {
  const { users, passwords, forget } = deps;
  return {
    async createUser(input: NewUserInput): Promise<Omit<User, "passwordHash">> {
      if (!usernamePattern.test(input.username)) {
        throw invalidArgument(
          "INVALID_USERNAME",
          "username must be 3–128 letters, digits or . _ @ -",
          {
            field: "username",
          },
        );
      }
      checkPasswordPolicy(input.password, input.username);
      const passwordHash = await passwords.hash(input.password);
      const { passwordHash: _hidden, ...user } = await users.create({
        username: input.username,
        email: input.email,
        passwordHash,
        roles: input.roles,
      });
      return user;
    },

    /** Sets a new password for the user with this username; false if there is none. */
    async setPassword(username: string, password: string): Promise<boolean> {
      checkPasswordPolicy(password, username);
      const user = await users.findByUsername(username);
      if (user === undefined) return false;
      return users.setPasswordHash(user.id, await passwords.hash(password));
    },

    async setActive(userId: string, isActive: boolean): Promise<boolean> {
      const changed = await users.setActive(userId, isActive);
      forget(userId);
      return changed;
    },
  };
}
