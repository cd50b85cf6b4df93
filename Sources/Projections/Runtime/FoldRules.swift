import InboxDomain

/// What a projection does with each type of the catalogue: for a type it handles, the keys its
/// events add to what the batch loads (`load`) and what they do to the loaded state (`fold`); the
/// other types it ignores, by name. A projection's `eventTypes` are its handled types, so the list
/// the fold dispatches on is the only list there is, and `ProjectionFoldTests` fails for a
/// catalogue type that a projection neither handles nor ignores.
///
/// A rule sees the event typed; the rules of one batch run in log order. Dispatch is one dictionary
/// look-up per event, by the payload's Swift type.
struct FoldRules<Keys, State>: Sendable {
    private struct Rule: Sendable {
        let load: (@Sendable (inout Keys, ProjectedEvent) -> Void)?
        let fold: @Sendable (inout State, ProjectedEvent) throws -> Void
    }

    private var rules: [ObjectIdentifier: Rule] = [:]
    private(set) var handledTypes: Set<String> = []
    let ignoredTypes: Set<String>

    /// Rules that ignore `ignored`, and handle what `on` adds.
    init(ignoring ignored: [any CatalogueEvent.Type]) {
        ignoredTypes = Set(ignored.map { $0.eventType })
    }

    /// Handles `type`: `load` adds what its events need from the tables, `fold` applies one to the state.
    mutating func on<E: CatalogueEvent>(
        _ type: E.Type, load: (@Sendable (inout Keys, E, ProjectedEvent) -> Void)? = nil,
        fold: @escaping @Sendable (inout State, E, ProjectedEvent) throws -> Void
    ) {
        precondition(!ignoredTypes.contains(E.eventType), "\(E.eventType) is both handled and ignored")
        var loadTyped: (@Sendable (inout Keys, ProjectedEvent) -> Void)?
        if let load {
            loadTyped = { (keys: inout Keys, event: ProjectedEvent) in
                if let payload = event.payload as? E { load(&keys, payload, event) }
            }
        }
        let foldTyped: @Sendable (inout State, ProjectedEvent) throws -> Void = { (state: inout State, event: ProjectedEvent) in
            if let payload = event.payload as? E { try fold(&state, payload, event) }
        }
        rules[ObjectIdentifier(type)] = Rule(load: loadTyped, fold: foldTyped)
        handledTypes.insert(E.eventType)
    }

    /// What `events` need loaded: `empty` with each handled event's keys added.
    func keys(of events: [ProjectedEvent], from empty: Keys) -> Keys {
        var keys = empty
        for event in events { rules[ObjectIdentifier(type(of: event.payload))]?.load?(&keys, event) }
        return keys
    }

    /// `loaded` with `events` applied in order. Events of types without a rule change nothing.
    func fold(_ events: [ProjectedEvent], from loaded: consuming State) throws -> State {
        var state = loaded
        try apply(events, to: &state)
        return state
    }

    /// `events` applied to `state` in order, in place; when one throws, `state` holds what the
    /// events before it did.
    func apply(_ events: [ProjectedEvent], to state: inout State) throws {
        for event in events { try rules[ObjectIdentifier(type(of: event.payload))]?.fold(&state, event) }
    }
}
