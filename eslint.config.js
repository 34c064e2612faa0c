// Flat config: typescript-eslint's recommended rules on every workspace.
import js from "@eslint/js";
import globals from "globals";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["**/node_modules/**", "**/dist/**", "**/.venv/**", "charts/**", "crds/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    rules: {
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_" },
      ],
    },
  },
  {
    // CommonJS consumers of the packed SDK (test/consumer): require() is what they test.
    files: ["test/consumer/fixtures/**"],
    rules: { "@typescript-eslint/no-require-imports": "off" },
  },
);
