%% rsock_echo.erl - an Erlang echo server and client for applications.bats: the
%% BEAM's own I/O (its poll set, non-blocking sockets, a port per socket,
%% writes from another process than the reader's).
%%   erl -noshell -pa DIR -s rsock_echo srv ADDR PORT N   serve N connections
%%     (each echoed by a process of its own, in active-once mode), then stop
%%   erl -noshell -pa DIR -s rsock_echo cli ADDR PORT FROM FILE N
%%     N connections from FROM at once; each sends FILE from a second
%%     process, shuts down its writing side and reads the echo to its end.
%%     Prints "intact K of N", then a line for each connection that was not:
%%     its error, or the bytes it got and where they first differ.
-module(rsock_echo).
-export([srv/1, cli/1]).

addr(A) -> {ok, Ip} = inet:parse_address(atom_to_list(A)), Ip.
num(A) -> list_to_integer(atom_to_list(A)).

srv([Addr, Port, N]) ->
    {ok, L} = gen_tcp:listen(num(Port), [binary, {ip, addr(Addr)}, {active, false},
                                         {reuseaddr, true}, {packet, 0},
                                         {exit_on_close, false}]),
    loop(L, num(N), []).

loop(_, 0, Refs) ->
    [receive {'DOWN', R, _, _, _} -> ok end || R <- Refs],
    init:stop();
loop(L, N, Refs) ->
    {ok, S} = gen_tcp:accept(L),
    {P, R} = spawn_monitor(fun() ->
        receive go -> ok end,
        echo(S) end),
    ok = gen_tcp:controlling_process(S, P),
    P ! go,
    loop(L, N - 1, [R | Refs]).

%% Active once, and the socket closed by us after the peer's EOF: with the
%% defaults ({active, true}, exit_on_close) the BEAM closes the socket when it
%% reads the EOF and drops the echo still queued in the port, on kernel TCP as
%% well whenever the socket's buffers are smaller than the echo.
echo(S) ->
    ok = inet:setopts(S, [{active, once}]),
    receive
        {tcp, S, D} -> ok = gen_tcp:send(S, D), echo(S);
        {tcp_closed, S} -> gen_tcp:close(S);
        {tcp_error, S, E} -> exit({tcp_error, E})
    end.

cli([Addr, Port, From, File, N]) ->
    {ok, Blob} = file:read_file(atom_to_list(File)),
    Self = self(),
    Count = num(N),
    [spawn(fun() ->
        {ok, S} = gen_tcp:connect(addr(Addr), num(Port),
                                  [binary, {ip, addr(From)}, {active, false}, {packet, 0}]),
        spawn(fun() -> ok = gen_tcp:send(S, Blob), ok = gen_tcp:shutdown(S, write) end),
        Self ! {done, verdict(rcv(S, []), Blob)} end) || _ <- lists:seq(1, Count)],
    Rs = [receive {done, R} -> R after 90000 -> timeout end || _ <- lists:seq(1, Count)],
    io:format("intact ~p of ~p~n", [length([x || intact <- Rs]), Count]),
    [io:format("  ~p~n", [R]) || R <- Rs, R =/= intact],
    init:stop().

%% intact, or what differs: an error, or the size and the first differing byte.
verdict(Blob, Blob) -> intact;
verdict({error, E}, _) -> {error, E};
verdict(Got, Blob) ->
    {got, byte_size(Got), expected, byte_size(Blob), first_difference, first_diff(Got, Blob, 0)}.

first_diff(<<A, Ra/binary>>, <<A, Rb/binary>>, I) -> first_diff(Ra, Rb, I + 1);
first_diff(_, _, I) -> I.

rcv(S, Acc) ->
    case gen_tcp:recv(S, 0, 60000) of
        {ok, D} -> rcv(S, [D | Acc]);
        {error, closed} -> iolist_to_binary(lists:reverse(Acc));
        {error, E} -> {error, E}
    end.
