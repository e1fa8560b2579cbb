# bash completion for kcache. Installed by meson into bash-completion's directory.
_kcache()
{
    local cur prev verb i
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    local verbs="stats ls inspect explain compile get prune export import verify remote config clear vacuum recompress path run version help"

    verb=
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            --path|--max-size|--dir|-d|--config-path|-M|-o|--set-config|-X|--recompress|--evict-older-than|--checksum-file|-k|--get-config|--evict-namespace|-F|--max-files) ((i++)) ;;
            -*) ;;
            *) verb=${COMP_WORDS[i]}; break ;;
        esac
    done

    # A setting's values after "config KEY" (and ccache's -o KEY=).
    if [[ $verb == config && $COMP_CWORD -ge 3 && ${COMP_WORDS[COMP_CWORD-2]} == config ]]; then
        case $prev in
            max_size) COMPREPLY=($(compgen -W "512M 1G 2G 4G 8G 16G none" -- "$cur")) ;;
            compression) COMPREPLY=($(compgen -W "zstd lz4 none" -- "$cur")) ;;
            disable|remote_read_only) COMPREPLY=($(compgen -W "true false" -- "$cur")) ;;
            busy_timeout|remote_connect_timeout|remote_timeout) COMPREPLY=($(compgen -W "1000 5000 30000" -- "$cur")) ;;
            remote) COMPREPLY=($(compgen -W "redis:// s3:// http:// https://" -- "$cur")) ;;
        esac
        return
    fi

    case $prev in
        -X|--recompress) COMPREPLY=($(compgen -W "zstd lz4 none" -- "$cur")); return ;;
        -M) COMPREPLY=($(compgen -W "512M 1G 2G 4G 8G none" -- "$cur")); return ;;
        --checksum-file) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        -o|--set-config)
            if [[ -z $verb ]]; then
                COMPREPLY=($(compgen -W "max_size= compression= disable= busy_timeout= remote=" -- "$cur"))
                compopt -o nospace 2>/dev/null
                return
            fi
            COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --path|--output|--from) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --dir|-d) COMPREPLY=($(compgen -d -- "$cur")); return ;;
        --config-path) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        -k|--get-config) COMPREPLY=($(compgen -W "max_size compression disable busy_timeout remote" -- "$cur")); return ;;
        --kind) COMPREPLY=($(compgen -W "cubin ptx ltoir data" -- "$cur")); return ;;
        --sort) COMPREPLY=($(compgen -W "accessed size created hits" -- "$cur")); return ;;
        # What NVRTC 13 accepts (nvrtcGetSupportedArchs), plus native.
        --arch) COMPREPLY=($(compgen -W "sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_90a sm_100 sm_100a sm_103 sm_110 sm_120 sm_121 compute_90 native" -- "$cur")); return ;;
        --max-size) COMPREPLY=($(compgen -W "512M 1G 2G 4G 8G none" -- "$cur")); return ;;
        --older-than|--evict-older-than) COMPREPLY=($(compgen -W "1h 1d 7d 30d" -- "$cur")); return ;;
        --since|--limit|--max-entries|--batch|--remote|--name-expr|--extra-digest|--std|--jobs|-j) return ;;
    esac

    if [[ -z $verb ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--dir --path --max-size --version --help -s --show-stats -z --zero-stats -C --clear -c --cleanup -p --show-config -M -o --set-config -V -x --show-compression -X --recompress --evict-older-than --checksum-file -d --config-path -k --get-config --print-stats --evict-namespace -F --max-files -v --verbose --json" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$verbs" -- "$cur"))
        fi
        return
    fi

    local opts="--help"
    case $verb in
        compile) opts+=" --arch --std --cubin --ptx --ltoir --name-expr --from --extra-digest --output --jobs --no-cache --refresh --require-hit --cache-key --remote --json --quiet" ;;
        explain) opts+=" --arch --std --cubin --ptx --ltoir --name-expr --from --extra-digest --output --jobs --no-cache --refresh --require-hit --remote --json --quiet" ;;
        stats) opts+=" --zero --namespace --json" ;;
        ls) opts+=" --arch --kind --namespace --sort --limit --json" ;;
        inspect) opts+=" --log --source --ptx --json" ;;
        get) opts+=" --output" ;;
        prune) opts+=" --max-size --older-than --arch --kind --namespace --max-entries --dry-run --json" ;;
        export) opts+=" --arch --kind --namespace --since --dir --sign --json" ;;
        import) opts+=" --dry-run --require-signature --resolve-conflicts --json" ;;
        verify) opts+=" --fix --recompile --json" ;;
        config) opts+=" --unset --json" ;;
        recompress) opts+=" --dry-run --show --batch --json" ;;
        remote) opts+=" --remote --arch --since --json" ;;
        path) opts+=" --path --json" ;;
        clear|vacuum|version) opts+=" --json" ;;
        run) opts+=" --verbose --print-shim" ;;
        help) COMPREPLY=($(compgen -W "$verbs" -- "$cur")); return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    elif [[ $verb == config ]]; then
        COMPREPLY=($(compgen -W "dir path max_size busy_timeout disable compression remote remote_read_only remote_connect_timeout remote_timeout remote_prefix remote_secret import_require_signature" -- "$cur"))
    elif [[ $verb == remote ]]; then
        COMPREPLY=($(compgen -W "check push pull" -- "$cur"))
    elif [[ $verb == export || $verb == import || $verb == compile || $verb == explain ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -F _kcache kcache
