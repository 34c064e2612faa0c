/**
 * `sandpit completion bash|zsh|fish`: a completion script for the shell, generated from the
 * command tree itself so it never lists a command or flag that does not exist.
 */
import { Argument, type Command } from "commander";
import { action } from "../command-kit.ts";
import { printJson } from "../output.ts";

interface Spec {
  name: string;
  description: string;
  flags: Array<{ long?: string; short?: string; description: string }>;
}

const SHELLS = { bash, zsh, fish } as const;

export function register(program: Command): void {
  program
    .command("completion")
    .description("print a shell completion script (e.g. `source <(sandpit completion bash)`)")
    .addArgument(new Argument("<shell>", "the shell").choices(Object.keys(SHELLS)))
    .addHelpText(
      "after",
      "\nInstall:\n  bash: echo 'source <(sandpit completion bash)' >> ~/.bashrc\n  zsh:  sandpit completion zsh > \"${fpath[1]}/_sandpit\"\n  fish: sandpit completion fish > ~/.config/fish/completions/sandpit.fish",
    )
    .action(
      action<[keyof typeof SHELLS], object>(async ([shell], o) => {
        const script = SHELLS[shell](specs(program));
        if (o.json) printJson({ shell, script });
        else process.stdout.write(script);
      }),
    );
}

function specs(program: Command): Spec[] {
  // --version belongs to the program alone.
  const globals = program.options.filter((o) => o.long !== "--version").map(flag);
  return program.commands.map((c) => ({
    name: c.name(),
    description: c.description(),
    flags: [
      ...c.options.map(flag),
      ...globals,
      { long: "--help", short: "-h", description: "show help" },
    ],
  }));
}

function flag(o: { long?: string | undefined; short?: string | undefined; description: string }) {
  return {
    ...(o.long ? { long: o.long } : {}),
    ...(o.short ? { short: o.short } : {}),
    description: o.description,
  };
}

function bash(cmds: Spec[]): string {
  const cases = cmds
    .map(
      (c) =>
        `    ${c.name}) words="${c.flags.flatMap((f) => [f.long, f.short].filter(Boolean)).join(" ")}" ;;`,
    )
    .join("\n");
  return `# sandpit completion for bash: source <(sandpit completion bash)
_sandpit() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" words
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "${cmds.map((c) => c.name).join(" ")} --help --version" -- "$cur"))
    return
  fi
  case "\${COMP_WORDS[1]}" in
${cases}
    *) words="" ;;
  esac
  if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$words" -- "$cur")); fi
}
complete -o default -F _sandpit sandpit
`;
}

/** zsh descriptions go inside [...] and '...': brackets, colons and quotes are dropped. */
function zq(text: string): string {
  return text.replace(/[[\]:'`\\]/g, "");
}

function zsh(cmds: Spec[]): string {
  const list = cmds.map((c) => `    '${c.name}:${zq(c.description)}'`).join("\n");
  const cases = cmds
    .map((c) => {
      const args = c.flags
        .flatMap((f) =>
          [f.long, f.short].filter(Boolean).map((n) => `'${n}[${zq(f.description)}]'`),
        )
        .join(" ");
      return `    ${c.name}) _arguments ${args} '*:file:_files' ;;`;
    })
    .join("\n");
  return `#compdef sandpit
# sandpit completion for zsh: sandpit completion zsh > "\${fpath[1]}/_sandpit"
_sandpit() {
  local -a commands
  commands=(
${list}
  )
  if (( CURRENT == 2 )); then
    _describe 'command' commands
    return
  fi
  shift words
  (( CURRENT-- ))
  case $words[1] in
${cases}
  esac
}
# Autoloaded from $fpath the file is the completion function; sourced, it registers one.
if [ "$funcstack[1]" = "_sandpit" ]; then _sandpit "$@"; else compdef _sandpit sandpit; fi
`;
}

function fish(cmds: Spec[]): string {
  const q = (t: string) => `'${t.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;
  const lines = [
    "# sandpit completion for fish: sandpit completion fish > ~/.config/fish/completions/sandpit.fish",
  ];
  lines.push("complete -c sandpit -f -n __fish_use_subcommand -l help -d 'show help'");
  for (const c of cmds) {
    lines.push(
      `complete -c sandpit -f -n __fish_use_subcommand -a ${c.name} -d ${q(c.description)}`,
    );
    for (const f of c.flags) {
      const names = [f.long && `-l ${f.long.slice(2)}`, f.short && `-s ${f.short.slice(1)}`]
        .filter(Boolean)
        .join(" ");
      lines.push(
        `complete -c sandpit -n '__fish_seen_subcommand_from ${c.name}' ${names} -d ${q(f.description)}`,
      );
    }
  }
  return `${lines.join("\n")}\n`;
}
